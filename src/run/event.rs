//! What happens in a run, one [`Event`] each: the transcript prints them, the run's event
//! log numbers and keeps them, and the API and a worker's result carry them as JSON.

use serde::{Deserialize, Serialize};

use super::failure::FailureKind;
use super::state::{ApprovalStatus, RunStatus, StepStatus};
use crate::assert::AssertFailure;
use crate::pipeline::Kind;

/// Something that happened in a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run began.
    RunStarted {
        /// Run id.
        run: u64,
        /// Job name.
        job: String,
        /// Pipeline file.
        pipeline: String,
    },
    /// Something the run says once, such as commands running unconfined.
    Notice {
        /// Run id.
        run: u64,
        /// The text.
        text: String,
    },
    /// A step began (an attempt of it, when `attempts` > 1).
    StepStarted {
        /// Run id.
        run: u64,
        /// The step's place in the outline.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth (0 for a job's own steps).
        depth: u32,
        /// Attempt number, from 1.
        attempt: u32,
    },
    /// A step (an attempt of it) was put on the NATS queue for a `treadle worker`
    /// (`treadle serve --nats`); it reads `queued` until a worker takes it.
    StepQueued {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Nesting depth.
        depth: u32,
    },
    /// A worker took a queued step: it runs there now.
    StepTaken {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Nesting depth.
        depth: u32,
        /// The worker's name.
        worker: String,
    },
    /// A line a task printed.
    Output {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// `stdout` or `stderr`.
        stream: std::borrow::Cow<'static, str>,
        /// The line, without its newline.
        line: String,
    },
    /// Something an agent step did (text, a tool call, a result, usage), as the agent
    /// module reports it.
    Agent {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// What it is: `text`, `tool_call`, `tool_result`, `usage`, ...
        what: String,
        /// Its content.
        data: serde_json::Value,
        /// One line for the plain transcript (carried in JSON so that a transcript streamed
        /// from `treadle serve` prints the same lines).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        summary: String,
        /// When it was shown (ms since the Unix epoch): a tool call's start and its
        /// result's arrival give the call's duration on the run page. Absent in
        /// transcripts written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<u64>,
    },
    /// A step ended.
    StepFinished {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth.
        depth: u32,
        /// How it ended.
        status: StepStatus,
        /// Wall time.
        duration_ms: u64,
        /// A task's exit code.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// An agent's verdict.
        #[serde(skip_serializing_if = "Option::is_none")]
        verdict: Option<String>,
        /// Why it failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The kind of that failure (`timeout`, `exit_status`, ...; see docs/pipelines.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<FailureKind>,
        /// The asserts that failed, typed.
        // Not read back: no rendering shows them, and `--json` lines pass through as they are.
        #[serde(skip_serializing_if = "Vec::is_empty", skip_deserializing)]
        asserts: Vec<AssertFailure>,
    },
    /// A step that will not run.
    StepSkipped {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Nesting depth.
        depth: u32,
        /// Why, when it was said (a workflow's `skip(label, reason)`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A step taken from the cache (or from a resumed run's record) instead of run.
    StepCached {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth.
        depth: u32,
        /// The step key.
        key: String,
        /// The run that recorded it.
        from_run: u64,
    },
    /// An approval step parked the run.
    ApprovalWaiting {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// The step's `message:`.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// When it times out (ms since the Unix epoch).
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
        /// How to answer, for the plain transcript (carried in JSON like an agent event's).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        summary: String,
    },
    /// An approval was answered (or timed out, or the run was interrupted).
    ApprovalAnswered {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// How it ended.
        status: ApprovalStatus,
        /// Who answered: a user, `timeout`.
        by: String,
    },
    /// The run ended.
    RunFinished {
        /// Run id.
        run: u64,
        /// How.
        status: RunStatus,
        /// Wall time.
        duration_ms: u64,
        /// Why it did not succeed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The kind of that failure, as a step's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<FailureKind>,
        /// The job's asserts that failed, typed.
        // Not read back: no rendering shows them, and `--json` lines pass through as they are.
        #[serde(skip_serializing_if = "Vec::is_empty", skip_deserializing)]
        asserts: Vec<AssertFailure>,
    },
}
