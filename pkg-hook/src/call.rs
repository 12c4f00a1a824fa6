//! What a hook is told about: the operation, its coordinates, its payload and its outcome.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use treadle_event::{GateId, LoopId, SessionId, StepId, TurnId};

/// An operation of the runtime that hooks can observe, and for some kinds veto.
///
/// The set is closed on purpose: rule 5 (hook-order) is stated in terms of these operations,
/// so adding one is a deliberate, breaking change rather than something a `_` arm absorbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// The work that answers one input.
    Turn,
    /// One model request/response cycle and its tool batch.
    Step,
    /// The model request of a step, from sending the request to the assistant message.
    Inference,
    /// The authorization of one tool call (a guard: it may be denied).
    ToolCall,
    /// The run of one authorized tool call.
    ToolExecution,
    /// Work parked on a gate until someone answers it.
    GateWait,
    /// A durable append to the journal (the step's commit, among others).
    JournalAppend,
    /// Older turns of a loop's history summarised to keep it within its budget (observed,
    /// not guarded: it runs between steps, and a failure leaves the history as it was).
    Compaction,
}

impl Operation {
    /// Every operation, in the order they nest inside a turn.
    pub const ALL: [Operation; 8] = [
        Operation::Turn,
        Operation::Step,
        Operation::Inference,
        Operation::ToolCall,
        Operation::ToolExecution,
        Operation::GateWait,
        Operation::JournalAppend,
        Operation::Compaction,
    ];

    /// The snake-case name, the same as the JSON encoding.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Turn => "turn",
            Operation::Step => "step",
            Operation::Inference => "inference",
            Operation::ToolCall => "tool_call",
            Operation::ToolExecution => "tool_execution",
            Operation::GateWait => "gate_wait",
            Operation::JournalAppend => "journal_append",
            Operation::Compaction => "compaction",
        }
    }

    /// Whether a hook's [`Decision::Deny`](crate::Decision::Deny) stops this operation.
    ///
    /// Only the points where stopping is meaningful and safe are guards: before a turn runs,
    /// before a request is sent, and before a tool call is authorized. A step, a tool
    /// execution or a journal append cannot be half-refused without breaking the
    /// history's invariants, so a deny there is ignored (with a warning).
    pub fn is_guard(self) -> bool {
        matches!(
            self,
            Operation::Turn | Operation::Inference | Operation::ToolCall
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The operation-specific part of a [`HookCall`].
///
/// Encodes as a JSON object with a snake-case `kind` tag, the same name as the operation:
/// `{"kind":"tool_call","call_id":"c1","name":"read","arguments":{}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Payload {
    Turn {
        /// The turn's position in its loop, from 0.
        index: u32,
        /// The input text the turn answers.
        input: String,
    },
    Step {
        /// The step's position in its turn, from 0.
        index: u32,
    },
    Inference {
        /// The model as configured, e.g. `provider/model`.
        model: String,
        /// The exact request body sent to the endpoint.
        request: serde_json::Value,
    },
    ToolCall {
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    ToolExecution {
        call_id: String,
        name: String,
        arguments: serde_json::Value,
    },
    GateWait {
        gate: GateId,
        question: String,
    },
    JournalAppend {
        /// The event type names being appended (`"step_done"`, ...). `Cow` so the runtime can
        /// pass static names without allocating, while an audit log can still be read back.
        events: Vec<Cow<'static, str>>,
    },
    Compaction {
        /// Messages of the history before compaction, and how many of them are summarised.
        messages: u32,
        replaced: u32,
        /// Estimated tokens of the history (text bytes / 4) and the budget it passed.
        tokens: u64,
        budget: u64,
    },
}

impl Payload {
    /// The operation this payload belongs to.
    pub fn operation(&self) -> Operation {
        match self {
            Payload::Turn { .. } => Operation::Turn,
            Payload::Step { .. } => Operation::Step,
            Payload::Inference { .. } => Operation::Inference,
            Payload::ToolCall { .. } => Operation::ToolCall,
            Payload::ToolExecution { .. } => Operation::ToolExecution,
            Payload::GateWait { .. } => Operation::GateWait,
            Payload::JournalAppend { .. } => Operation::JournalAppend,
            Payload::Compaction { .. } => Operation::Compaction,
        }
    }

    /// The tool name, for tool calls and tool executions.
    pub fn tool_name(&self) -> Option<&str> {
        match self {
            Payload::ToolCall { name, .. } | Payload::ToolExecution { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// The id of one operation: its `begin` and its `finish` carry the same, and no other
/// operation of this process has it. Encodes as a number.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct OperationId(pub u64);

impl OperationId {
    /// The next id of this process (from 1; 0 is never given, only read back from records
    /// written before ids existed).
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        OperationId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op-{}", self.0)
    }
}

/// What an operation is about: which operation, where it happens, and its payload; and,
/// so that a hook can measure it without a map of its own, its id and when it began.
///
/// `op` and `payload` are both public for easy matching. Build calls with [`HookCall::new`],
/// which derives `op` from the payload so the two cannot disagree, gives the call a fresh
/// [`OperationId`] and starts its clock. In `finish`, [`HookCall::elapsed`] is how long
/// the operation took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HookCall {
    pub op: Operation,
    /// The operation's id; `begin` and `finish` of one operation carry the same.
    #[serde(default)]
    pub id: OperationId,
    /// When the operation began, in milliseconds since the Unix epoch (wall clock, for
    /// logs; [`HookCall::elapsed`] measures with a monotonic clock).
    #[serde(default)]
    pub started_at_ms: u64,
    pub session: SessionId,
    /// Named `loop` in JSON, like the event header.
    #[serde(rename = "loop")]
    pub loop_id: LoopId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepId>,
    pub payload: Payload,
    /// The monotonic start behind [`HookCall::elapsed`]; a call read back from JSON starts
    /// when it is read.
    #[serde(skip, default = "Instant::now")]
    started: Instant,
}

/// Equal when everything but the monotonic start is: two calls of one operation (with the
/// same id) are the same call.
impl PartialEq for HookCall {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op
            && self.id == other.id
            && self.started_at_ms == other.started_at_ms
            && self.session == other.session
            && self.loop_id == other.loop_id
            && self.turn == other.turn
            && self.step == other.step
            && self.payload == other.payload
    }
}

impl HookCall {
    /// A call in one loop, with `op` taken from the payload, no turn or step yet, a fresh
    /// [`OperationId`] and its clock started now.
    pub fn new(session: SessionId, loop_id: LoopId, payload: Payload) -> Self {
        let started_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Self {
            op: payload.operation(),
            id: OperationId::next(),
            started_at_ms,
            session,
            loop_id,
            turn: None,
            step: None,
            payload,
            started: Instant::now(),
        }
    }

    pub fn with_turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }

    pub fn with_step(mut self, step: StepId) -> Self {
        self.step = Some(step);
        self
    }

    /// How long since the operation began: in `finish`, its duration.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// How an operation ended: what [`Hook::finish`](crate::Hook::finish) is told. Named for
/// the operation, so that it is not read as a turn's outcome (`treadle_session::TurnOutcome`,
/// what a caller of a session gets).
///
/// Encodes with a snake-case `status` tag: `{"status":"denied","reason":"..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum OperationOutcome {
    Completed,
    /// A guard hook (or, for tool calls, a policy) refused the operation.
    Denied {
        reason: String,
    },
    /// The operation failed; for a step this means it was discarded (rule 4).
    Failed {
        error: String,
    },
    /// The operation was interrupted before it ended.
    Canceled,
}

/// The old name of [`OperationOutcome`].
#[deprecated(note = "renamed OperationOutcome (a turn's ending is treadle_session::TurnOutcome)")]
pub type Outcome = OperationOutcome;

impl OperationOutcome {
    pub fn denied(reason: impl Into<String>) -> Self {
        OperationOutcome::Denied {
            reason: reason.into(),
        }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        OperationOutcome::Failed {
            error: error.into(),
        }
    }

    /// The snake-case name, the same as the JSON `status` tag.
    pub fn name(&self) -> &'static str {
        match self {
            OperationOutcome::Completed => "completed",
            OperationOutcome::Denied { .. } => "denied",
            OperationOutcome::Failed { .. } => "failed",
            OperationOutcome::Canceled => "canceled",
        }
    }

    pub fn is_completed(&self) -> bool {
        matches!(self, OperationOutcome::Completed)
    }
}
