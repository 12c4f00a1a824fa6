//! The work of a leaf step that may run here or on a worker: a task's command or an
//! agent, taken from the typed step where the executor (or a worker) meets it.

use crate::pipeline::{AgentCall, At, RunSpec, Step, StepKind, TaskKeys};

/// What a leaf that runs here or on a worker does: a task's command, or an agent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Work<'a> {
    /// `task:` with this command, and its `fix:` and mappings.
    Task(&'a At<RunSpec>, &'a TaskKeys),
    /// `agent:`, with its call (the agent resolved at load).
    Agent(&'a AgentCall),
}

impl<'a> Work<'a> {
    /// The work of `step`, when it is a task or an agent.
    pub(crate) fn of(step: &'a Step) -> Option<Self> {
        match &step.kind {
            StepKind::Task { run, keys, .. } => Some(Self::Task(run, keys)),
            StepKind::Agent(call) => Some(Self::Agent(call)),
            _ => None,
        }
    }
}
