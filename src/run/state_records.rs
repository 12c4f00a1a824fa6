//! What the state file records of a run and of each of its steps: [`RunRecord`],
//! [`StepRecord`] and their statuses (the store that reads and writes them is `state`).

use serde::{Deserialize, Serialize};

use super::done::Status;
use super::failure::{FailureKind, StepFailure};
// Defined with the cache's records (a replay restores it): the cache sits below `run`.
pub use crate::cache::records::{Produced, Streams};

/// How a run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Still going (or the process died; see `treadle runs`).
    Running,
    /// Every step succeeded.
    Succeeded,
    /// A step failed.
    Failed,
    /// The pipeline could not be run (infrastructure or configuration).
    Errored,
    /// Interrupted (Ctrl-C).
    Aborted,
}

/// A step's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not reached yet.
    Pending,
    /// On the NATS queue, no worker has taken it yet (`treadle serve --nats`).
    Queued,
    /// In progress.
    Running,
    /// Finished well.
    Succeeded,
    /// Finished badly (non-zero exit, timeout, failed assert, stopped by its group).
    Failed,
    /// Could not be run (configuration, infrastructure, the model provider).
    Errored,
    /// Stopped by the run's interruption (Ctrl-C, or its process stopped while it ran).
    Aborted,
    /// Never ran (an earlier failure, a verdict route, fail_fast).
    Skipped,
}

impl StepStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Errored => "errored",
            Self::Aborted => "aborted",
            Self::Skipped => "skipped",
        }
    }

    /// Whether it ended without succeeding (failed, errored or aborted).
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Errored | Self::Aborted)
    }
}

/// The record of a step that ended: its outcome's status.
impl From<Status> for StepStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Succeeded => Self::Succeeded,
            Status::Failed => Self::Failed,
            Status::Errored => Self::Errored,
            Status::Aborted => Self::Aborted,
        }
    }
}

/// The record of a run that ended: its job's status.
impl From<Status> for RunStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Succeeded => Self::Succeeded,
            Status::Failed => Self::Failed,
            Status::Errored => Self::Errored,
            Status::Aborted => Self::Aborted,
        }
    }
}

impl RunStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Errored => "errored",
            Self::Aborted => "aborted",
        }
    }
}

/// One run of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Run id, increasing from 1 per state file.
    pub id: u64,
    /// The pipeline file as given.
    pub pipeline: String,
    /// The job.
    pub job: String,
    /// Status.
    pub status: RunStatus,
    /// Start, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Duration once ended.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Why it failed or errored.
    #[serde(default)]
    pub error: Option<String>,
    /// The kind of that failure (absent in records written before kinds were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
}

/// What a failed step kept, as its record holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// Where: the directory of the copies, relative to the state file's directory
    /// (`runs/3/kept/fixer`).
    pub dir: String,
    /// The outputs kept (those the step's directory still had).
    pub outputs: Vec<String>,
}

/// One step of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    /// Position in the plan outline (nested steps and hooks included).
    pub seq: u32,
    /// Where it is in the plan, e.g. `2/in_parallel/0`.
    pub path: String,
    /// Display name.
    pub name: String,
    /// Kind key (`task`, `agent`, `do`, ...).
    pub kind: String,
    /// Status.
    pub status: StepStatus,
    /// Start, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// How long it ran (all attempts).
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Attempts made.
    #[serde(default)]
    pub attempts: u32,
    /// Its exit code, output, verdict and usage (for a step taken from the cache, what
    /// they were when it ran: see `cached_from`).
    #[serde(flatten)]
    pub produced: Produced,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The kind of that failure (absent in records written before kinds were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// The run whose record this step was taken from (a cache hit), instead of running:
    /// it spent nothing in this run. Older state files call it `replayed_from`.
    #[serde(default, alias = "replayed_from")]
    pub cached_from: Option<u64>,
    /// `keep_on_failure:`: the outputs this step kept when it failed (`super::exec::kept`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
    /// The run whose kept outputs this step started from (a `--rerun` of a step that kept
    /// them when it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_kept: Option<u64>,
    /// The `treadle worker` that took the step (its last attempt's), under `--nats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

impl StepRecord {
    /// A step of the outline before it runs: the run's first record of it.
    pub fn pending(seq: u32, path: String, name: String, kind: String) -> Self {
        Self {
            seq,
            path,
            name,
            kind,
            status: StepStatus::Pending,
            started_ms: None,
            duration_ms: None,
            attempts: 0,
            produced: Produced::default(),
            error: None,
            failure: None,
            cached_from: None,
            kept: None,
            from_kept: None,
            worker: None,
        }
    }

    /// Keeps `failure` (message and kind) as why the step ended; `None` clears both.
    pub fn set_failure(&mut self, failure: Option<StepFailure>) {
        self.failure = failure.as_ref().map(|f| f.kind);
        self.error = failure.map(|f| f.message);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cache::records::tests::reread;

    #[test]
    fn a_step_record_of_todays_format_reads_and_writes_the_same_keys() {
        // Written by the struct before `Produced` was taken out of it, field by field.
        let old = json!({
            "seq": 4,
            "path": "0",
            "name": "review",
            "kind": "agent",
            "status": "succeeded",
            "started_ms": 10,
            "duration_ms": 20,
            "exit_code": null,
            "attempts": 1,
            "stdout_tail": "fine\n",
            "streams": {"stdout": "fine\n", "stderr": ""},
            "error": null,
            "verdict": "approve",
            "note": "tests pass",
            "usage": {"output_tokens": 9},
            "cached_from": 2,
            "worker": "w1",
        });
        let (again, read) = reread::<StepRecord>(&old);
        assert_eq!(again, old);
        assert_eq!(read.produced.verdict.as_deref(), Some("approve"));
        assert_eq!(read.produced.note.as_deref(), Some("tests pass"));
        assert_eq!(read.produced.stdout_tail, "fine\n");
        assert_eq!(read.produced.usage, Some(json!({"output_tokens": 9})));
        // A record of before `streams`, `note` and `cached_from` (`replayed_from` then).
        let older = json!({
            "seq": 4,
            "path": "0",
            "name": "build",
            "kind": "task",
            "status": "failed",
            "exit_code": 1,
            "stdout_tail": "boom\n",
            "replayed_from": 2,
        });
        let (_, read) = reread::<StepRecord>(&older);
        assert_eq!(read.produced.exit_code, Some(1));
        assert_eq!(read.produced.stdout_tail, "boom\n");
        assert_eq!((read.produced.streams, read.produced.note), (None, None));
        assert_eq!(read.cached_from, Some(2));
    }
}
