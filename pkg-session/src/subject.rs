//! The typed subject of a permission gate, as journaled in `GateOpened`, and the typed
//! request a gate's answerer gets.
//!
//! The event type keeps the subject as JSON (pipelines journal their own approval subjects);
//! the session writes and reads its tool-call gates only through [`GateSubject`], so the
//! journal shape lives in one place:
//!
//! ```json
//! {
//!   "calls": [{ "call_id": "c1", "name": "write_file", "arguments": { "path": "a.md" } }],
//!   "scope": { "tools": ["write_file"] },
//!   "asked_by": "policy",
//!   "deadline_at_ms": 1767225600000,
//!   "resume": { "step": "<step id>", "index": 2, "message": { "role": "assistant" },
//!               "usage": {}, "model": "..." }
//! }
//! ```

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use treadle_event::{Event, EventKind, GateAnswer, GateId, Message, StepId, Usage};

/// The step a gate parked: what the turn needs to run its batch and commit it, without
/// asking the model again. Journaled as `resume` of every tool-call gate's subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StagedStep {
    pub step: StepId,
    pub index: u32,
    /// The assistant message, with every tool use of the batch.
    pub message: Message,
    pub usage: Usage,
    pub model: String,
}

/// One tool call a gate asks about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateCall {
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The call's arguments, parsed and checked against the tool's schema.
    pub arguments: Value,
}

/// What an `ApproveAlways` answer to a gate approves: these tools, for the session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateScope {
    #[serde(default)]
    pub tools: Vec<String>,
}

/// The subject of a tool-call permission gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateSubject {
    /// The call (a gate covers one call; the batch asks call by call).
    #[serde(default)]
    pub calls: Vec<GateCall>,
    #[serde(default)]
    pub scope: GateScope,
    /// The hook whose guard asked.
    #[serde(default)]
    pub asked_by: String,
    /// When the gate expires, in milliseconds since the Unix epoch. A restore keeps it:
    /// downtime counts against it. Missing reads as 0, already passed (fail closed).
    #[serde(default)]
    pub deadline_at_ms: u64,
    /// The staged step, for restore; absent in journals written before gates carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resume: Option<StagedStep>,
}

impl GateSubject {
    /// The subject of a gate over one call.
    pub(crate) fn for_call(
        call: GateCall,
        asked_by: &str,
        deadline_at_ms: u64,
        staged: &StagedStep,
    ) -> Self {
        GateSubject {
            scope: GateScope {
                tools: vec![call.name.clone()],
            },
            calls: vec![call],
            asked_by: asked_by.to_owned(),
            deadline_at_ms,
            resume: Some(staged.clone()),
        }
    }

    /// Reads a journaled subject. `None` when it is not a tool-call gate's subject (a
    /// pipeline approval, say).
    pub fn from_value(subject: &Value) -> Option<Self> {
        serde_json::from_value(subject.clone()).ok()
    }

    /// The journaled form.
    pub fn to_value(&self) -> Value {
        // A struct of strings, numbers and JSON values always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The ids of the calls this gate covers.
    pub(crate) fn call_ids(&self) -> impl Iterator<Item = &str> {
        self.calls.iter().map(|call| call.call_id.as_str())
    }
}

/// A permission question, typed: which tool call waits, and why. Handed to the
/// [`on_gate`](crate::SessionBuilder::on_gate) handler, or read from a `GateOpened` event
/// with [`GateRequest::from_event`].
#[derive(Debug, Clone, PartialEq)]
pub struct GateRequest {
    /// Answer it with this id ([`Session::respond_gate`](crate::Session::respond_gate)).
    pub gate: GateId,
    pub call_id: String,
    /// The tool the model called.
    pub tool: String,
    /// The call's arguments, parsed and checked against the tool's schema.
    pub arguments: serde_json::Value,
    /// Why permission is asked: the guard's question.
    pub reason: String,
    /// The hook whose guard asked.
    pub asked_by: String,
}

impl GateRequest {
    /// The request a `GateOpened` event announces; `None` for other events and for gates
    /// that are not over a tool call.
    pub fn from_event(event: &Event) -> Option<Self> {
        let EventKind::GateOpened {
            gate,
            question,
            subject,
        } = &event.kind
        else {
            return None;
        };
        let subject = GateSubject::from_value(subject)?;
        let call = subject.calls.into_iter().next()?;
        Some(GateRequest {
            gate: *gate,
            call_id: call.call_id,
            tool: call.name,
            arguments: call.arguments,
            reason: question.clone(),
            asked_by: subject.asked_by,
        })
    }
}

/// The session's answerer of permission gates, set with
/// [`SessionBuilder::on_gate`](crate::SessionBuilder::on_gate).
pub(crate) type GateHandler =
    Arc<dyn Fn(GateRequest) -> BoxFuture<'static, GateAnswer> + Send + Sync + 'static>;
