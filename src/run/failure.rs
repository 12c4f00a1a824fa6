//! Why a step (or a run) did not succeed, as a typed value: [`StepFailure`], a
//! [`FailureKind`] and the human message. It is built once, where the failure happens,
//! and carried unchanged to the state file, the transcript's `--json` lines, the API and
//! the NATS wire, which show the kind beside the message as a stable snake_case word
//! (`"failure": "timeout"`), so that a caller branches on the kind, never on the text.
//! docs/pipelines.md lists the words.

use serde::{Deserialize, Serialize};

/// What kind of failure ended a step. The words are stable: scripts branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A task's command exited non-zero or was killed by a signal.
    ExitStatus,
    /// The step's `timeout:` passed (or the job's, or an input's deadline).
    Timeout,
    /// The step was stopped before its end: the run was interrupted (Ctrl-C, a stopped
    /// process), or its group stopped it (a `fail_fast` sibling, a race lost).
    Interrupted,
    /// Its `assert:` (or the job's) did not hold.
    AssertsFailed,
    /// The step reached a limit: an agent's model calls or tool calls (or it repeated the
    /// same call without effect), `max_visits`, a task's `limits: { step_output }`.
    Limit,
    /// An agent step (or the job) spent its token or dollar budget.
    Budget,
    /// An agent step gave no verdict, or one that is not listed.
    NoVerdict,
    /// An agent step's answer did not fit `output_schema:`, or a required tool never
    /// succeeded.
    InvalidOutput,
    /// The model provider failed: unreachable, HTTP errors, a cut stream.
    ModelOutage,
    /// A hook, a policy or the command's confinement refused what the step did.
    Refused,
    /// A person said no: an input declined, an approval or an escalation rejected.
    Declined,
    /// The step did not leave an output it declares, or an input it needs was never
    /// produced.
    Outputs,
    /// The step cannot run as written: a missing key variable, an unknown route, a
    /// template that does not render, no container runtime for `image:`.
    Configuration,
    /// Treadle could not do its part: the state file, the disk, git, a resource's
    /// script, the workers.
    Infrastructure,
    /// Any other way the step failed.
    Other,
}

impl FailureKind {
    /// The kind as its snake_case word (`timeout`, `exit_status`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExitStatus => "exit_status",
            Self::Timeout => "timeout",
            Self::Interrupted => "interrupted",
            Self::AssertsFailed => "asserts_failed",
            Self::Limit => "limit",
            Self::Budget => "budget",
            Self::NoVerdict => "no_verdict",
            Self::InvalidOutput => "invalid_output",
            Self::ModelOutage => "model_outage",
            Self::Refused => "refused",
            Self::Declined => "declined",
            Self::Outputs => "outputs",
            Self::Configuration => "configuration",
            Self::Infrastructure => "infrastructure",
            Self::Other => "other",
        }
    }

    /// Whether the step could not be run at all (exit code 2, `on_error:`), rather than
    /// ran and failed: treadle's side or the pipeline's, not the step's doing.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            Self::ModelOutage | Self::Configuration | Self::Infrastructure
        )
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step's failure: its kind and the message a person reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// Why, in words (secrets masked where it came from the step's output).
    pub message: String,
}

impl StepFailure {
    /// A failure of `kind`, saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::FailureKind;

    #[test]
    fn every_kind_serializes_as_its_word() {
        let kinds = [
            FailureKind::ExitStatus,
            FailureKind::Timeout,
            FailureKind::Interrupted,
            FailureKind::AssertsFailed,
            FailureKind::Limit,
            FailureKind::Budget,
            FailureKind::NoVerdict,
            FailureKind::InvalidOutput,
            FailureKind::ModelOutage,
            FailureKind::Refused,
            FailureKind::Declined,
            FailureKind::Outputs,
            FailureKind::Configuration,
            FailureKind::Infrastructure,
            FailureKind::Other,
        ];
        for kind in kinds {
            let json = serde_json::to_value(kind).expect("a kind serializes");
            assert_eq!(json, kind.as_str());
            let back: FailureKind = serde_json::from_value(json).expect("and reads back");
            assert_eq!(back, kind);
        }
    }
}
