//! Connects the executor's ports to the agent and assert modules.

use std::sync::Arc;

use async_trait::async_trait;

use crate::pipeline::{JobAssert, StepAssert};
use crate::run::{AgentRunner, AgentStepError, AgentStepOutcome, AgentStepRequest, Checker, JobFacts, StepFacts};

/// The agent runner `treadle run` uses.
pub fn default_agent_runner() -> Arc<dyn AgentRunner> {
    Arc::new(Unavailable)
}

/// The assert checker `treadle run` uses.
pub fn default_checker() -> Arc<dyn Checker> {
    Arc::new(Asserts)
}

struct Unavailable;

#[async_trait]
impl AgentRunner for Unavailable {
    async fn run(&self, _: AgentStepRequest<'_>) -> Result<AgentStepOutcome, AgentStepError> {
        Err(AgentStepError::Infrastructure("agent steps are not available in this build".to_owned()))
    }
}

struct Asserts;

impl Checker for Asserts {
    fn check_step(&self, _: &StepAssert, _: &StepFacts) -> Vec<String> {
        vec!["asserts are not available in this build".to_owned()]
    }
    fn check_job(&self, _: &JobAssert, _: &JobFacts) -> Vec<String> {
        vec!["asserts are not available in this build".to_owned()]
    }
}
