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
use crate::agent::AgentStep;

/// Who an agent step's questions go to instead of this process's mailbox.
#[derive(Clone)]
pub struct Questions {
    /// Yes-or-no questions: permissions, escalations.
    pub asker: Arc<dyn crate::agent::Asker>,
    /// `ask_human` questions.
    pub answerer: crate::agent::Answerer,
}

/// One tool call an agent made (with its result), as the agent module records it.
pub use crate::agent::RecordedCall as ToolCallFact;

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

/// What an agent step did.
#[derive(Debug, Clone, Default)]
pub struct AgentStepOutcome {
    /// The chosen verdict.
    pub verdict: Option<String>,
    /// The reason given with the verdict.
    pub note: Option<String>,
    /// The final text.
    pub text: String,
    /// Tool calls in order.
    pub tool_calls: Vec<ToolCallFact>,
    /// Usage and cost as JSON (recorded with the step).
    pub usage: Option<serde_json::Value>,
    /// Tokens spent, for job budgets.
    pub tokens: u64,
    /// US dollars spent, for job dollar budgets (`None`: the model has no price).
    pub usd: Option<f64>,
    /// Why the step failed (budget spent, no verdict given, ...), when it did.
    pub failure: Option<StepFailure>,
}

/// Why an agent step could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum AgentStepError {
    /// The session, its journal or a model tape could not be used (exit code 2).
    #[error("{0}")]
    Infrastructure(String),
    /// The model provider failed (exit code 2).
    #[error("{0}")]
    ModelOutage(String),
    /// The step failed (exit code 1).
    #[error("{0}")]
    Failed(String),
}

impl AgentStepError {
    /// The step's failure it stands for.
    pub fn failure(&self) -> StepFailure {
        let kind = match self {
            Self::Infrastructure(_) => FailureKind::Infrastructure,
            Self::ModelOutage(_) => FailureKind::ModelOutage,
            Self::Failed(_) => FailureKind::Other,
        };
        StepFailure::new(kind, self.to_string())
    }
}

/// Runs agent steps.
#[async_trait]
pub trait AgentRunner: Send + Sync {
    /// Runs one agent step to its end.
    async fn run(&self, request: AgentStepRequest) -> Result<AgentStepOutcome, AgentStepError>;
}
