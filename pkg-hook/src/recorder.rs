//! `Recorder`: a ready-made hook that writes down every begin and finish, for audits and proofs.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use treadle_event::{StepId, TurnId};

use crate::call::{HookCall, Operation, OperationOutcome};
use crate::hook::{Decision, Hook};

/// Which end of an operation a [`Record`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Begin,
    Finish,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Begin => "begin",
            Phase::Finish => "finish",
        }
    }
}

/// One hook invocation seen by a [`Recorder`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub op: Operation,
    pub phase: Phase,
    /// Set on [`Phase::Finish`] only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OperationOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepId>,
    /// The tool name, for tool calls and tool executions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Record {
    /// `"<op>.<phase>"`, e.g. `"inference.begin"`: the vocabulary of rule 5, so a proof can
    /// compare a whole sequence at a glance.
    pub fn label(&self) -> String {
        format!("{}.{}", self.op.name(), self.phase.name())
    }
}

/// A hook that records every begin and finish, in the order the runner calls it.
///
/// It always allows. Clones share one log, so keep a clone to read it after registering:
///
/// ```
/// use std::sync::Arc;
/// use treadle_hook::{HookRunner, Recorder};
///
/// let recorder = Recorder::new();
/// let runner = HookRunner::new(vec![Arc::new(recorder.clone())]);
/// assert_eq!(runner.len(), 1);
/// assert!(recorder.records().is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct Recorder {
    name: Arc<str>,
    records: Arc<Mutex<Vec<Record>>>,
}

impl Recorder {
    /// A recorder named `"recorder"`.
    pub fn new() -> Self {
        Self::named("recorder")
    }

    /// A recorder with another name, to tell several apart (e.g. when proving nesting order).
    pub fn named(name: impl Into<Arc<str>>) -> Self {
        Self {
            name: name.into(),
            records: Arc::default(),
        }
    }

    /// A copy of everything recorded so far, oldest first.
    pub fn records(&self) -> Vec<Record> {
        self.lock().clone()
    }

    /// [`Record::label`] of every record, oldest first.
    pub fn labels(&self) -> Vec<String> {
        self.lock().iter().map(Record::label).collect()
    }

    /// Forgets everything recorded so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Record>> {
        // A poisoned lock only means another thread panicked mid-push; the log is still
        // a valid Vec, and an audit log is more useful kept than lost.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, call: &HookCall, phase: Phase, outcome: Option<&OperationOutcome>) {
        let record = Record {
            op: call.op,
            phase,
            outcome: outcome.cloned(),
            turn: call.turn,
            step: call.step,
            name: call.payload.tool_name().map(str::to_owned),
        };
        self.lock().push(record);
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Hook for Recorder {
    fn name(&self) -> &str {
        &self.name
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        self.push(call, Phase::Begin, None);
        Decision::Allow
    }

    async fn finish(
        &self,
        call: &HookCall,
        outcome: &OperationOutcome,
        _output: Option<&serde_json::Value>,
    ) {
        self.push(call, Phase::Finish, Some(outcome));
    }
}
