//! Connects the executor's ports to the agent step (`crate::agent`) and to the asserts
//! (`crate::assert`).
//!
//! Agent sessions journal to `journal.redb` beside the state file: the session journal
//! owns its redb database, and redb lets one handle per file exist, so it cannot share
//! `state.redb`. The journal is opened on the first agent step only, so task-only
//! pipelines never create it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OnceCell;
use treadle_session::Journal;

use crate::agent::{AgentEvent, AgentStatus, AgentStep, Prices, run_agent_step};
use crate::assert::{self, JobOutcome};
use crate::pipeline::{JobAssert, StepAssert};
use crate::run::{
    AgentRunner, AgentStepError, AgentStepOutcome, AgentStepRequest, Checker, JobFacts, StepFacts,
};

/// The agent runner `treadle run` uses: real sessions journaled at `journal`.
pub fn default_agent_runner(journal: PathBuf, prices: Prices) -> Arc<dyn AgentRunner> {
    Arc::new(SessionAgents {
        path: journal,
        journal: OnceCell::new(),
        prices,
    })
}

/// The assert checker `treadle run` uses.
pub fn default_checker() -> Arc<dyn Checker> {
    Arc::new(Asserts)
}

struct SessionAgents {
    path: PathBuf,
    journal: OnceCell<Journal>,
    prices: Prices,
}

impl SessionAgents {
    async fn journal(&self) -> Result<&Journal, AgentStepError> {
        self.journal
            .get_or_try_init(|| async {
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || Journal::open(&path).map_err(|e| e.to_string()))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r)
                    .map_err(|e| {
                        AgentStepError::Infrastructure(format!(
                            "cannot open the session journal {}: {e}",
                            self.path.display()
                        ))
                    })
            })
            .await
    }
}

#[async_trait]
impl AgentRunner for SessionAgents {
    async fn run(&self, request: AgentStepRequest<'_>) -> Result<AgentStepOutcome, AgentStepError> {
        let journal = self.journal().await?;
        let mut step =
            AgentStep::from_pipeline(request.agent, request.step, request.model, request.dir)
                .with_prices(&self.prices);
        if let Some((limit, spent)) = request.job_budget {
            step = step.with_job_budget(limit, spent);
        }
        let reporter = request.reporter.clone();
        let observer =
            move |event: AgentEvent| reporter.show(event.what(), event.data(), event.summary());
        let outcome = run_agent_step(&step, journal, &observer, &request.cancel)
            .await
            .map_err(|e| AgentStepError::Infrastructure(e.to_string()))?;
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
        let usage = serde_json::json!({
            "model": outcome.model,
            "prompt_tokens": outcome.usage.prompt_tokens,
            "completion_tokens": outcome.usage.completion_tokens,
            "cached_tokens": outcome.usage.cached_tokens,
            "cost": outcome.cost,
            "model_calls": outcome.steps,
        });
        let failure = match &outcome.status {
            // The endpoint or the session failing is not the step's doing: exit code 2.
            AgentStatus::Failed { error } => {
                return Err(AgentStepError::Infrastructure(format!(
                    "agent step failed: {error}"
                )));
            }
            other => other.error(),
        };
        Ok(AgentStepOutcome {
            verdict: outcome.verdict.clone(),
            text: outcome.text.clone(),
            tool_calls: outcome.tool_calls.clone(),
            usage: Some(usage),
            tokens: outcome.usage.total(),
            failure,
        })
    }
}

struct Asserts;

impl Checker for Asserts {
    fn check_step(&self, spec: &StepAssert, facts: &StepFacts) -> Vec<String> {
        let facts = assert::StepFacts {
            dir: &facts.dir,
            stdout: &facts.stdout,
            code: facts.exit_code,
            verdict: facts.verdict.as_deref(),
            tool_calls: &facts.tool_calls,
        };
        assert::check_step(spec, &facts)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn check_job(&self, spec: &JobAssert, facts: &JobFacts) -> Vec<String> {
        let outcome = if facts.succeeded {
            JobOutcome::Success
        } else {
            JobOutcome::Failure
        };
        let facts = assert::JobFacts {
            executed: &facts.execution,
            outcome,
        };
        assert::check_job(spec, &facts)
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
