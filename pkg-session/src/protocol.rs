//! The loop actor's message protocol: what sessions, turns and batches ask a loop to do.
//!
//! Everything that crosses into the actor is declared here, so the actor, the turn task and
//! the batch depend on this module and never on each other.

use std::sync::Arc;

use ractor::RpcReplyPort;
use tokio::sync::oneshot;
use treadle_event::{
    EventKind, GateAnswer, GateId, Header, InputId, Message, StepId, TurnId, Usage,
};

use crate::error::{CommitError, GateError, SubmitError};
use crate::inference::ToolSpec;
use crate::journal::AppendError;
use crate::subject::GateSubject;

/// One step's group of messages, as the turn asks the actor to commit it.
pub(crate) struct StepCommit {
    pub step: StepId,
    pub index: u32,
    /// Shared by the turn's next request, the actor's history and the `StepDone`.
    pub messages: Arc<[Message]>,
    pub usage: Usage,
    pub model: String,
    /// Effect results journaled in the same append, before the `StepDone` (see
    /// `batch_scope::Deferred`).
    pub effects: Vec<EventKind>,
}

/// Coordinates of the turn in flight, used to stamp the events it emits.
#[derive(Clone, Copy)]
pub(crate) struct TurnCoords {
    pub turn: TurnId,
    pub input: InputId,
}

/// How one turn must answer, beyond the loop's configuration (typed output uses it).
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnOptions {
    /// Sent as the request's `response_format`.
    pub response_format: Option<serde_json::Value>,
    /// A tool offered for this turn only. When the model calls it, the turn ends with the
    /// call's arguments as its text.
    pub report_tool: Option<ToolSpec>,
    /// The `tool_choice` of the turn's first model call only (later calls are the model's
    /// choice again, so a forced call cannot repeat forever).
    pub first_choice: Option<crate::inference::ToolChoice>,
    /// Tool exchanges the turn commits as its first step, before any model call (see
    /// `seed.rs`).
    pub seed: Vec<Message>,
}

/// What the batch sends the actor to open a permission gate.
pub(crate) struct GateOpen {
    pub coords: TurnCoords,
    pub step: StepId,
    pub gate: GateId,
    pub question: String,
    pub subject: GateSubject,
    /// Where the actor sends the answer once it is journaled.
    pub answer: oneshot::Sender<GateAnswer>,
}

pub(crate) enum LoopMsg {
    Submit {
        text: String,
        options: TurnOptions,
        reply: RpcReplyPort<Result<InputId, SubmitError>>,
    },
    Commit {
        coords: TurnCoords,
        commit: StepCommit,
        reply: RpcReplyPort<Result<(), CommitError>>,
    },
    TurnEnded {
        coords: TurnCoords,
        terminal: EventKind,
    },
    Interrupt {
        reply: RpcReplyPort<bool>,
    },
    /// Interrupt without an answer, for a caller that cannot wait (a dropped delegation).
    Cancel,
    History {
        reply: RpcReplyPort<Vec<Message>>,
    },
    /// Journal `Compacted` and replace the first `replaced` messages of the history with
    /// the summary (see `compact.rs`).
    Compact {
        coords: TurnCoords,
        compacted: Compacted,
        reply: RpcReplyPort<Result<(), CommitError>>,
    },
    /// A tool call asks for permission: journal `GateOpened` and keep the gate pending.
    OpenGate {
        request: GateOpen,
        reply: RpcReplyPort<Result<(), AppendError>>,
    },
    /// Journal an enduring event of the turn in flight (an effect's intent or result).
    Record {
        header: Header,
        kind: EventKind,
        reply: RpcReplyPort<Result<u64, AppendError>>,
    },
    /// An answer (or the deadline's `Expired`): journal `GateResolved`, wake the call.
    ResolveGate {
        gate: GateId,
        answer: GateAnswer,
        reply: Option<RpcReplyPort<Result<(), GateError>>>,
    },
    /// Stop the loop. `reply` is `None` when the last session handle was dropped and
    /// nobody waits for the end.
    Shutdown {
        reason: String,
        reply: Option<RpcReplyPort<()>>,
    },
}

/// A compaction a turn asks its actor to commit.
pub(crate) struct Compacted {
    pub replaced: usize,
    pub summary: Message,
    pub tokens_before: u64,
    pub tokens_after: u64,
}
