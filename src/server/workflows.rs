//! What the server needs of a workflow written in Rust ([`CodeWorkflow`], implemented by
//! `crate::workflow::Server`'s registrations) and the set it serves ([`CodeWorkflows`]);
//! starting and resuming their runs is `super::code`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::run::event_log::EventLog;
use crate::run::{AgentRunner, Store};

/// How a run of a workflow ended: its id, or why it could not begin or be recorded.
pub type Ended = Result<u64, Box<dyn std::error::Error + Send + Sync>>;

/// A run of a workflow, to be spawned.
pub type Running = Pin<Box<dyn Future<Output = Ended> + Send>>;

/// Told a run's id and journal once it has begun.
pub type OnBegin = Box<dyn FnOnce(u64, Arc<EventLog>) + Send>;

/// What the server gives a run of a workflow.
pub struct Launch {
    /// The state file the server holds.
    pub store: Arc<Store>,
    /// Runs its agent steps.
    pub agents: Arc<dyn AgentRunner>,
    /// Cancels it (`POST /runs/{id}/cancel`, the server's shutdown).
    pub cancel: CancellationToken,
    /// The run it resumes (one a stopped server left running).
    pub resume: Option<u64>,
    /// Told its id and journal.
    pub on_begin: OnBegin,
}

/// An input that is not the workflow's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// A workflow the server can start.
pub trait CodeWorkflow: Send + Sync {
    /// Its name: the `pipeline` a run is started by, and its runs' pipeline and job.
    fn name(&self) -> &str;
    /// The JSON Schema of its input.
    fn input_schema(&self) -> &serde_json::Value;
    /// Its run on `input` (already checked against the schema), or why `input` is not
    /// its input (it does not deserialize).
    fn launch(&self, input: serde_json::Value, launch: Launch) -> Result<Running, InputError>;
}

/// The workflows a server serves, by name.
#[derive(Clone, Default)]
pub struct CodeWorkflows(Vec<Arc<dyn CodeWorkflow>>);

impl CodeWorkflows {
    /// These workflows.
    pub fn new(list: Vec<Arc<dyn CodeWorkflow>>) -> Self {
        Self(list)
    }

    /// The workflow named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn CodeWorkflow>> {
        self.0.iter().find(|w| w.name() == name).cloned()
    }

    /// Every workflow, in the order registered.
    pub fn all(&self) -> &[Arc<dyn CodeWorkflow>] {
        &self.0
    }
}

impl std::fmt::Debug for CodeWorkflows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|w| w.name()))
            .finish()
    }
}
