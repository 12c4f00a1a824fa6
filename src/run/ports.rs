//! The executor's interface to the agent runner ([`super::agents`]: real sessions,
//! optionally through a model tape).
//!
//! The executor builds the [`AgentStep`] once, prepares the step directory, checks the key
//! variable is set, and hands an [`AgentStepRequest`] to an [`AgentRunner`]; it then checks
//! the step's `assert:` itself with `crate::assert`. The runner is a trait so that the
//! taped runner of `--record`/`--replay-model` and the real one are interchangeable.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::failure::{FailureKind, StepFailure};
use super::state::Store;
use super::transcript::{Event, Transcript};
use crate::agent::{AgentOutcome, AgentStep};

/// Who an agent step's questions go to instead of this process's mailbox.
#[derive(Clone)]
pub struct Questions {
    /// Yes-or-no questions: permissions, escalations.
    pub asker: Arc<dyn crate::agent::Asker>,
    /// `ask_human` questions.
    pub answerer: crate::agent::Answerer,
}

/// Shows and records what an agent step does.
#[derive(Clone)]
pub struct StepReporter {
    pub(crate) transcript: Arc<Transcript>,
    pub(crate) store: Arc<Store>,
    pub(crate) run: u64,
    pub(crate) seq: u32,
}

impl StepReporter {
    /// Shows something in the transcript only: `summary` on the plain transcript, `what`
    /// and `data` in `--json` lines.
    pub fn show(&self, what: &str, data: serde_json::Value, summary: String) {
        self.transcript.emit(&Event::Agent {
            run: self.run,
            seq: self.seq,
            what: what.to_owned(),
            data,
            summary,
            at_ms: Some(crate::clock::now_ms()),
        });
    }

    /// Publishes a piece of the model's streamed text to the run's live followers.
    pub fn token(&self, text: &str) {
        self.transcript.token(self.seq, text);
    }

    /// Records something in the state file with the step (tool calls and results, the
    /// final text, usage). Secrets are masked first.
    pub async fn record(&self, what: &str, data: serde_json::Value) {
        let masked = self.transcript.redactor().mask(&data.to_string());
        let data: serde_json::Value =
            serde_json::from_str(&masked).unwrap_or(serde_json::Value::String(masked));
        let store = self.store.clone();
        let (run, seq) = (self.run, self.seq);
        let event = serde_json::json!({ "what": what, "data": data });
        // Recording is best effort: losing one event must not fail the step.
        let _ =
            tokio::task::spawn_blocking(move || store.append_agent_event(run, seq, &event)).await;
    }
}

/// Everything an agent step needs.
pub struct AgentStepRequest {
    /// The step as the executor built it once ([`AgentStep::build`]) and keyed it, in its
    /// directory and with the job's budget added.
    pub step: AgentStep,
    /// The session journal, which lives in the state file.
    pub journal: treadle_session::Journal,
    /// Transcript and state.
    pub reporter: StepReporter,
    /// Cancelled on timeout or Ctrl-C.
    pub cancel: CancellationToken,
}

/// Why an agent step could not be run at all: its session, its journal or a model tape
/// could not be used (exit code 2). A turn that ran and ended badly (a model outage
/// included) is not this: it is an [`AgentOutcome`] whose `status` says how it ended.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AgentStepError(pub String);

impl AgentStepError {
    /// The step's failure it stands for.
    pub fn failure(&self) -> StepFailure {
        StepFailure::new(FailureKind::Infrastructure, self.0.clone())
    }
}

/// Runs agent steps.
#[async_trait]
pub trait AgentRunner: Send + Sync {
    /// Runs one agent step to its end: what its turn did, however the turn ended.
    async fn run(&self, request: AgentStepRequest) -> Result<AgentOutcome, AgentStepError>;
}
