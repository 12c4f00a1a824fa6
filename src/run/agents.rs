//! The agent runner the executor uses: each agent step as a real session
//! (`crate::agent::run_agent_step`), its events shown and recorded with the step.
//!
//! Agent sessions journal into the state file itself: the executor opens the session
//! journal at `state.redb` and hands it to each step in [`AgentStepRequest::journal`].
//!
//! With a [`ModelTape`] (`--record`, `--replay-model`), each agent step's session talks to
//! the tape's loopback server for that step instead of the model's endpoint, and each of
//! its sub-agents to one of its own (`STEP.SUB`).

use std::sync::Arc;
use treadle_session::event::FailureCause;

use async_trait::async_trait;

use super::ports::{AgentRunner, AgentStepError, AgentStepOutcome, AgentStepRequest, StepReporter};
use crate::agent::{AgentEvent, AgentObserver, AgentStatus, run_agent_step};
use crate::model_tape::{ModelTape, StepTape, TapeError};

/// The agent runner `treadle run` uses: real sessions, journaled in the state file.
pub fn default_agent_runner() -> Arc<dyn AgentRunner> {
    taped_agent_runner(None)
}

/// Like [`default_agent_runner`], recording or replaying every agent step's model traffic
/// through `tape` when one is given.
pub fn taped_agent_runner(tape: Option<Arc<ModelTape>>) -> Arc<dyn AgentRunner> {
    Arc::new(SessionAgents { tape })
}

struct SessionAgents {
    tape: Option<Arc<ModelTape>>,
}

#[async_trait]
impl AgentRunner for SessionAgents {
    async fn run(&self, request: AgentStepRequest) -> Result<AgentStepOutcome, AgentStepError> {
        let journal = &request.journal;
        let mut step = request.step;
        let tape = match &self.tape {
            Some(tape) => Some(
                tape.open_step(
                    &step.name,
                    &step.model.base_url,
                    Arc::new(tape_secrets(&step)),
                )
                .await
                .map_err(|e| AgentStepError::Infrastructure(e.to_string()))?,
            ),
            None => None,
        };
        if let Some(tape) = &tape {
            step.model.base_url = tape.base_url().to_owned();
        }
        // The sub-agents' calls go through tapes of their own, as the step's do.
        let sub_tapes = match &self.tape {
            Some(t) => {
                let name = step.name.clone();
                taped_delegates(t, &name, &mut step.granted)
                    .await
                    .map_err(|e| AgentStepError::Infrastructure(e.to_string()))?
            }
            None => Vec::new(),
        };
        let observer = Shown(request.reporter.clone());
        let result = run_agent_step(&step, journal, &observer, &request.cancel).await;
        // A replay mismatch explains whatever error the refused request caused, so it wins.
        for tape in tape.into_iter().chain(sub_tapes) {
            tape.finish()
                .await
                .map_err(|e| AgentStepError::Infrastructure(e.to_string()))?;
        }
        let outcome = result.map_err(|e| AgentStepError::Infrastructure(e.to_string()))?;
        for call in &outcome.tool_calls {
            request
                .reporter
                .record("tool_call", serde_json::to_value(call).unwrap_or_default())
                .await;
        }
        request
            .reporter
            .record("text", serde_json::Value::String(outcome.text.clone()))
            .await;
        for escalation in &outcome.escalations {
            request
                .reporter
                .record(
                    "escalation",
                    serde_json::to_value(escalation).unwrap_or_default(),
                )
                .await;
        }
        if let Some(typed) = &outcome.typed_output {
            request.reporter.record("typed_output", typed.clone()).await;
        }
        let usage = serde_json::json!({
            "model": outcome.model,
            "prompt_tokens": outcome.usage.prompt_tokens,
            "completion_tokens": outcome.usage.completion_tokens,
            "cached_tokens": outcome.usage.cached_tokens,
            "cost": outcome.cost,
            "model_calls": outcome.steps,
            "confidence": outcome.confidence,
            "fallback_model": outcome.fallback_model,
        });
        let failure = match &outcome.status {
            // The endpoint or the journal failing is not the step's doing: exit code 2. A
            // limit or a denial is the step's own failure, like a task's non-zero exit.
            AgentStatus::Failed {
                error,
                cause: FailureCause::Model | FailureCause::Journal,
            } => {
                return Err(AgentStepError::Infrastructure(format!(
                    "agent step failed: {error}"
                )));
            }
            other => other.error(),
        };
        Ok(AgentStepOutcome {
            verdict: outcome.verdict.clone(),
            note: outcome.verdict_reason.clone(),
            text: outcome.text.clone(),
            tool_calls: outcome.tool_calls.clone(),
            usage: Some(usage),
            tokens: outcome.usage.total(),
            usd: outcome.cost.usd(),
            failure,
        })
    }
}

/// Shows an agent step's events in the run's transcript, and its tokens to live followers.
struct Shown(StepReporter);

impl AgentObserver for Shown {
    fn on_event(&self, event: AgentEvent) {
        self.0.show(event.what(), event.data(), event.summary());
    }

    fn on_token(&self, text: &str) {
        self.0.token(text);
    }
}

/// Points every sub-agent of `granted` (and theirs) at a tape of its own, named
/// `STEP.SUB` (`STEP.SUB.SUBSUB` further down): in a recording, its calls are written
/// beside the step's; in a replay, they are answered from there and no endpoint is
/// called. A sub-agent runs inside one tool call of its parent, so its calls keep their
/// order from run to run.
fn taped_delegates<'a>(
    tape: &'a ModelTape,
    prefix: &'a str,
    granted: &'a mut crate::agent::Granted,
) -> futures::future::BoxFuture<'a, Result<Vec<StepTape>, TapeError>> {
    Box::pin(async move {
        let mut tapes = Vec::new();
        for d in &mut granted.delegates {
            let name = format!("{prefix}.{}", d.name);
            let secrets = Arc::new(tape_secrets(&d.step));
            let model = &mut d.step.model;
            let opened = tape.open_step(&name, &model.base_url, secrets).await?;
            model.base_url = opened.base_url().to_owned();
            tapes.push(opened);
            tapes.extend(taped_delegates(tape, &name, &mut d.step.granted).await?);
        }
        Ok(tapes)
    })
}

/// The secrets masked in what a step's tape records: every secret of its pipeline.
fn tape_secrets(step: &crate::agent::AgentStep) -> treadle_session::Secrets {
    treadle_session::Secrets::new(crate::agent::secret_values(step))
}
