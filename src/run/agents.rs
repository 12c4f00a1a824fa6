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

use async_trait::async_trait;

use super::ports::{AgentRunner, AgentStepError, AgentStepRequest, StepReporter};
use crate::agent::{AgentEvent, AgentObserver, AgentOutcome, run_agent_step};
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
    async fn run(&self, request: AgentStepRequest) -> Result<AgentOutcome, AgentStepError> {
        let mut step = request.step;
        let tapes = self.open_tapes(&mut step).await?;
        let observer = Shown(request.reporter.clone());
        let result = run_agent_step(&step, &request.journal, &observer, &request.cancel).await;
        // A replay mismatch explains whatever error the refused request caused, so it wins.
        for tape in tapes {
            tape.finish().await.map_err(infrastructure)?;
        }
        let outcome = result.map_err(infrastructure)?;
        report(&request.reporter, &outcome).await;
        Ok(outcome)
    }
}

impl SessionAgents {
    /// With a tape: opens the step's (pointing the step at its loopback server) and its
    /// sub-agents' (the step's tape first); without one, none.
    async fn open_tapes(
        &self,
        step: &mut crate::agent::AgentStep,
    ) -> Result<Vec<StepTape>, AgentStepError> {
        let Some(tape) = &self.tape else {
            return Ok(Vec::new());
        };
        let secrets = Arc::new(tape_secrets(step));
        let own = tape
            .open_step(&step.name, &step.model.base_url, secrets)
            .await
            .map_err(infrastructure)?;
        step.model.base_url = own.base_url().to_owned();
        // The sub-agents' calls go through tapes of their own, as the step's do.
        let name = step.name.clone();
        let subs = taped_delegates(tape, &name, &mut step.granted)
            .await
            .map_err(infrastructure)?;
        Ok(std::iter::once(own).chain(subs).collect())
    }
}

/// The session could not be used: not the step's doing (exit code 2).
fn infrastructure(e: impl std::fmt::Display) -> AgentStepError {
    AgentStepError(e.to_string())
}

/// Records what the agent did with the step: its tool calls, its text, its escalations and
/// its typed output.
async fn report(reporter: &StepReporter, outcome: &AgentOutcome) {
    for call in &outcome.tool_calls {
        let call = serde_json::to_value(call).unwrap_or_default();
        reporter.record("tool_call", call).await;
    }
    let text = serde_json::Value::String(outcome.text.clone());
    reporter.record("text", text).await;
    for escalation in &outcome.escalations {
        let escalation = serde_json::to_value(escalation).unwrap_or_default();
        reporter.record("escalation", escalation).await;
    }
    if let Some(typed) = &outcome.typed_output {
        reporter.record("typed_output", typed.clone()).await;
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
