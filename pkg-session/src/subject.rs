//! The typed subject of a permission gate, as journaled in `GateOpened`, and the typed
//! question a gate's answerer gets.
//!
//! The event type keeps the subject as JSON (pipelines journal their own approval subjects);
//! the session writes and reads its tool-call gates only through [`GateSubject`], so the
//! journal shape lives in one place:
//!
//! ```json
//! {
//!   "calls": [{ "call_id": "c1", "name": "write_file", "arguments": { "path": "a.md" } }],
//!   "scope": { "tools": ["write_file"] },
//!   "kind": "permission",
//!   "asked_by": "policy",
//!   "deadline_at_ms": 1767225600000,
//!   "resume": { "step": "<step id>", "index": 2, "message": { "role": "assistant" },
//!               "usage": {}, "model": "..." }
//! }
//! ```
//!
//! `kind` says what the gate asks: `permission` (a guard's `Ask`, answered approve or deny),
//! `human_input` (an `ask_human` call; `human` holds the question and the answer's schema)
//! or `effect` (an effectful call that a crash caught between its intent and its result).
//! A subject without `kind` is a permission gate's (journals written before kinds).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use treadle_event::{Event, EventKind, GateAnswer, GateId, Message, StepId, Usage};

use crate::error::WrongAnswer;
use crate::question::HumanQuestion;

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

/// The subject an `EffectIntent` journals: the staged step, for restore to resume it.
pub(crate) fn staged_value(staged: &StagedStep) -> Value {
    serde_json::json!({ "resume": staged })
}

/// Reads the staged step back from an `EffectIntent`'s subject.
pub(crate) fn staged_of(subject: &Value) -> Option<StagedStep> {
    serde_json::from_value(subject.get("resume")?.clone()).ok()
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

/// What a gate asks, and so which answers it takes (see [`GateKind::admits`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// May this call run? `Approve`, `ApproveAlways` or `Deny`.
    #[default]
    Permission,
    /// A person's answer to an `ask_human` question: `Answer { value }` (checked against the
    /// question's schema) or `Deny`.
    HumanInput,
    /// An effectful call that was running at a crash: `Approve` runs it again,
    /// `Answer { value }` skips it with `value` as its result, `Deny` fails the turn.
    Effect,
}

impl GateKind {
    /// Whether `answer` answers a gate of this kind; the error says which answers would.
    /// `Deny` and `Expired` answer every gate (a refusal, or the deadline).
    pub(crate) fn admits(
        self,
        human: Option<&HumanQuestion>,
        answer: &GateAnswer,
    ) -> Result<(), WrongAnswer> {
        match (self, answer) {
            (_, GateAnswer::Deny { .. } | GateAnswer::Expired) => Ok(()),
            (GateKind::Permission, GateAnswer::Approve | GateAnswer::ApproveAlways) => Ok(()),
            (GateKind::Permission, GateAnswer::Answer { .. }) => {
                Err(WrongAnswer::ValueForPermission)
            }
            (GateKind::HumanInput, GateAnswer::Answer { value }) => match human {
                Some(question) => Ok(question.check(value)?),
                None => Ok(()),
            },
            (GateKind::HumanInput, _) => Err(WrongAnswer::QuestionWithoutValue),
            (GateKind::Effect, GateAnswer::Approve | GateAnswer::Answer { .. }) => Ok(()),
            (GateKind::Effect, GateAnswer::ApproveAlways) => Err(WrongAnswer::AlwaysForEffect),
        }
    }
}

/// The subject of a tool-call gate: a permission, a person's question or an unfinished
/// effect (see [`GateKind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateSubject {
    #[serde(default)]
    pub kind: GateKind,
    /// The question of a `human_input` gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human: Option<HumanQuestion>,
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
            kind: GateKind::Permission,
            human: None,
            scope: GateScope {
                tools: vec![call.name.clone()],
            },
            calls: vec![call],
            asked_by: asked_by.to_owned(),
            deadline_at_ms,
            resume: Some(staged.clone()),
        }
    }

    /// The subject of a gate over one call that is not a permission: a person's question
    /// or an unfinished effect. Its scope is empty: `ApproveAlways` remembers nothing.
    pub(crate) fn for_kind(
        kind: GateKind,
        call: GateCall,
        human: Option<HumanQuestion>,
        deadline_at_ms: u64,
        staged: &StagedStep,
    ) -> Self {
        GateSubject {
            kind,
            human,
            calls: vec![call],
            scope: GateScope::default(),
            asked_by: match kind {
                GateKind::Permission => "policy",
                GateKind::HumanInput => "ask_human",
                GateKind::Effect => "effects",
            }
            .to_owned(),
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

/// What a gate asks, typed: which tool call waits, and why; a
/// [`GateAnswer`](treadle_event::GateAnswer) answers it. Handed to the
/// [`on_gate`](crate::SessionBuilder::on_gate) handler, or read from a `GateOpened` event
/// with [`GateQuestion::from_event`].
#[derive(Debug, Clone, PartialEq)]
pub struct GateQuestion {
    /// Answer it with this id ([`Session::respond_gate`](crate::Session::respond_gate)).
    pub gate: GateId,
    pub call_id: String,
    /// The tool the model called.
    pub tool: String,
    /// The call's arguments, parsed and checked against the tool's schema.
    pub arguments: serde_json::Value,
    /// Why permission is asked: the guard's question.
    pub reason: String,
    /// The hook whose guard asked (`ask_human` or `effects` for the other kinds).
    pub asked_by: String,
    /// What the gate asks; for `HumanInput`, `human` holds the question.
    pub kind: GateKind,
    /// The question of a `HumanInput` gate: answer it with
    /// `GateAnswer::Answer { value }`, where `value` fits `human.schema`.
    pub human: Option<HumanQuestion>,
}

/// The old name of [`GateQuestion`]: a gate asks a question and takes a
/// [`GateAnswer`](treadle_event::GateAnswer).
#[deprecated(note = "renamed GateQuestion, the question a GateAnswer answers")]
pub type GateRequest = GateQuestion;

impl GateQuestion {
    /// The question a `GateOpened` event announces; `None` for other events and for gates
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
        Some(GateQuestion {
            gate: *gate,
            call_id: call.call_id,
            tool: call.name,
            arguments: call.arguments,
            reason: question.clone(),
            asked_by: subject.asked_by,
            kind: subject.kind,
            human: subject.human,
        })
    }
}

/// The session's answerer of permission gates, set with
/// [`SessionBuilder::on_gate`](crate::SessionBuilder::on_gate).
pub(crate) type GateHandler =
    Arc<dyn Fn(GateQuestion) -> BoxFuture<'static, GateAnswer> + Send + Sync + 'static>;
