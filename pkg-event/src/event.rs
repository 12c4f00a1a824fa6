//! The event union, its header of coordinates, and each kind's class and scope.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::content::{Message, Usage};
use crate::fork::ForkLink;
use crate::ids::{EventId, GateId, InputId, LoopId, SessionId, StepId, TurnId};

/// What led to an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Cause {
    Input(InputId),
    Gate(GateId),
}

/// Where and when an event happened. Coordinates that do not apply are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub id: EventId,
    pub session: SessionId,
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepId>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

impl Header {
    /// A header for a session-wide event, stamped now with a fresh id.
    pub fn session(session: SessionId) -> Self {
        Self {
            id: EventId::new(),
            session,
            loop_id: None,
            turn: None,
            step: None,
            at_ms: now_ms(),
            cause: None,
        }
    }

    /// A header for an event of one loop.
    pub fn in_loop(session: SessionId, loop_id: LoopId) -> Self {
        Self {
            loop_id: Some(loop_id),
            ..Self::session(session)
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

    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Which stream of model output a [`EventKind::TokenDelta`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    Text,
    Reasoning,
    /// A piece of a tool call's arguments; the delta's `index` names the call.
    ToolArguments,
}

/// How a gate was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum GateAnswer {
    Approve,
    /// Approve, and remember the approval for the gate's scope.
    ApproveAlways,
    Deny {
        reason: String,
    },
    /// Nobody answered before the deadline; treated as a denial.
    Expired,
    /// A value: the answer to a person's question (an `ask_human` gate, checked against the
    /// question's schema), or the result to use instead of re-running an unfinished effect.
    Answer {
        value: serde_json::Value,
    },
}

impl GateAnswer {
    /// A denial with `reason` (the model reads `denied: <reason>`).
    pub fn deny(reason: impl Into<String>) -> Self {
        GateAnswer::Deny {
            reason: reason.into(),
        }
    }
}

/// Where a delegated session comes from: the session whose tool call started it, and that
/// tool's name. Journaled with the child's `SessionStarted`, so a reader of the journal can
/// nest the child's stream under the call that asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The calling session.
    pub session: SessionId,
    /// The tool through which it called (the sub-agent's name).
    pub tool: String,
}

/// What happened. The `type` tag of the JSON encoding is the variant name in snake case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    // Ephemeral: never journaled; a slow subscriber may miss them.
    /// A piece of streamed model output, tagged with the step in the header.
    TokenDelta {
        kind: DeltaKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<u32>,
        text: String,
    },
    ToolCallStarted {
        call_id: String,
        name: String,
        arguments: String,
    },
    ToolCallCompleted {
        call_id: String,
        name: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An input waits behind the turn in flight; `position` 1 runs next.
    InputQueued {
        input: InputId,
        position: u32,
    },

    // Enduring: journaled before anyone sees them.
    SessionStarted {
        model: String,
        endpoint: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system: Option<String>,
        /// The session (and its tool) that started this one to answer a call: a sub-agent
        /// run as a session of its own. `None` for a session nobody delegated to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<ParentLink>,
        /// The session this one was forked from, and where: its first events are copies of
        /// that session's committed history (see [`ForkLink`]). A field here rather than an
        /// event kind of its own, so that a build that predates forks still reads the
        /// journal (an unknown field is ignored; an unknown kind would not decode), and so
        /// that the link is in the session's first event, written in the same atomic
        /// append as the copied history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fork: Option<ForkLink>,
    },
    /// A turn began. Its input message joins the committed history with this event.
    TurnStarted {
        input: InputId,
        message: Message,
    },
    /// One step's messages, committed to history, and the tokens it spent.
    StepDone {
        index: u32,
        /// Shared, not copied: the loop's history, the journal's write and each
        /// subscriber's event hold this one allocation. Encoded as a JSON array, as a
        /// `Vec` was.
        messages: Arc<[Message]>,
        usage: Usage,
        model: String,
    },
    /// The history grew past the loop's compaction budget: its first `replaced` messages
    /// were replaced by `summary` (a user message the model wrote about them). A restore
    /// applies it, so the history it rebuilds is the compacted one.
    Compacted {
        replaced: u32,
        summary: Message,
        /// Estimated tokens of the history before and after (text bytes / 4).
        tokens_before: u64,
        tokens_after: u64,
    },
    GateOpened {
        gate: GateId,
        question: String,
        #[serde(default)]
        subject: serde_json::Value,
    },
    GateResolved {
        gate: GateId,
        answer: GateAnswer,
    },
    /// An effectful tool call is about to run (journaled before it starts). `subject`
    /// holds the step's staged assistant message, so a restore can resume the batch.
    EffectIntent {
        call_id: String,
        name: String,
        arguments: serde_json::Value,
        #[serde(default)]
        subject: serde_json::Value,
    },
    /// The result of an effectful call whose `EffectIntent` is journaled.
    EffectResult {
        call_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An input that will never run, for example because the queue was full.
    InputCancelled {
        input: InputId,
        reason: String,
    },
    SessionStopped {
        reason: String,
    },
    /// The session was restored from its journal (after a stop or a crash) and runs again
    /// in a new process or handle; the history it restored is the journal's through
    /// `through_seq`.
    SessionRestored {
        through_seq: u64,
    },

    // Terminals: enduring, and each ends exactly one turn.
    TurnDone {
        text: String,
        steps: u32,
        usage: Usage,
    },
    TurnFailed {
        error: String,
        steps: u32,
        usage: Usage,
        /// Named `failure` because `cause` is the header's field in the flat encoding.
        #[serde(default)]
        failure: FailureCause,
        /// With [`FailureCause::Model`], how the model endpoint failed (absent in events
        /// written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<ModelFailure>,
    },
    TurnInterrupted {
        reason: String,
        steps: u32,
        usage: Usage,
    },
}

/// The delivery class of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Never journaled; may be dropped for a slow subscriber.
    Ephemeral,
    /// Journaled before it is published; never silently lost.
    Enduring,
    /// Enduring, and ends a turn.
    Terminal,
}

impl Class {
    pub fn is_enduring(self) -> bool {
        !matches!(self, Class::Ephemeral)
    }
}

/// Whether an event belongs to the session as a whole or to one loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Session,
    Loop,
}

/// What made a turn fail, so a caller can tell its own step's failure from a broken
/// dependency without parsing the error text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The model endpoint: unreachable, an HTTP error, a malformed or cut stream.
    Model,
    /// A limit of the turn: its steps or its tool calls.
    Limit,
    /// A guard hook denied the turn or an inference.
    Denied,
    /// The journal could not record the step.
    Journal,
    /// The model was stuck in a loop: it repeated the same tool call with the same result
    /// after being told that doing so changes nothing.
    Repeated,
    /// Anything else (and events written before causes were recorded).
    #[default]
    Other,
}

/// How a model endpoint failed, so that a caller (`fallback:`) decides on the kind of
/// failure, not on its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelFailure {
    /// No HTTP response: refused, DNS, reset before the head.
    Unreachable,
    /// Silent past the idle timeout, over the call time limit, or HTTP 408.
    Timeout,
    /// HTTP 429.
    RateLimited,
    /// HTTP 5xx.
    ServerError,
    /// Any other non-success status (a 4xx refusal: bad key, bad request...).
    Refused,
    /// A stream chunk that is not the JSON a chat-completions server sends.
    Malformed,
    /// The stream ended before the answer finished.
    StreamCut,
    /// The server reported an error inside the stream.
    Remote,
    /// The answer passed the response size limit.
    TooLarge,
    /// Any other failure of the HTTP exchange (TLS, protocol).
    Transport,
}

impl ModelFailure {
    /// Whether the endpoint itself failed (an outage) rather than answered: another model
    /// may succeed where this one did. A refusal, a malformed or oversized answer and an
    /// error the model reported are answers: another model would not be a fix for them.
    pub fn is_outage(self) -> bool {
        match self {
            Self::Unreachable
            | Self::Timeout
            | Self::RateLimited
            | Self::ServerError
            | Self::StreamCut
            | Self::Transport => true,
            Self::Refused | Self::Malformed | Self::Remote | Self::TooLarge => false,
        }
    }
}

/// The three ways a turn can end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalKind {
    Done,
    Failed,
    Interrupted,
}

impl EventKind {
    pub fn class(&self) -> Class {
        use EventKind::*;
        match self {
            TokenDelta { .. }
            | ToolCallStarted { .. }
            | ToolCallCompleted { .. }
            | InputQueued { .. } => Class::Ephemeral,
            SessionStarted { .. }
            | TurnStarted { .. }
            | StepDone { .. }
            | Compacted { .. }
            | GateOpened { .. }
            | GateResolved { .. }
            | EffectIntent { .. }
            | EffectResult { .. }
            | InputCancelled { .. }
            | SessionStopped { .. }
            | SessionRestored { .. } => Class::Enduring,
            TurnDone { .. } | TurnFailed { .. } | TurnInterrupted { .. } => Class::Terminal,
        }
    }

    pub fn scope(&self) -> Scope {
        match self {
            EventKind::SessionStarted { .. }
            | EventKind::SessionStopped { .. }
            | EventKind::SessionRestored { .. } => Scope::Session,
            _ => Scope::Loop,
        }
    }

    pub fn terminal(&self) -> Option<TerminalKind> {
        match self {
            EventKind::TurnDone { .. } => Some(TerminalKind::Done),
            EventKind::TurnFailed { .. } => Some(TerminalKind::Failed),
            EventKind::TurnInterrupted { .. } => Some(TerminalKind::Interrupted),
            _ => None,
        }
    }

    /// The snake-case name used as the JSON `type` tag.
    pub fn name(&self) -> &'static str {
        use EventKind::*;
        match self {
            TokenDelta { .. } => "token_delta",
            ToolCallStarted { .. } => "tool_call_started",
            ToolCallCompleted { .. } => "tool_call_completed",
            InputQueued { .. } => "input_queued",
            SessionStarted { .. } => "session_started",
            TurnStarted { .. } => "turn_started",
            StepDone { .. } => "step_done",
            Compacted { .. } => "compacted",
            GateOpened { .. } => "gate_opened",
            GateResolved { .. } => "gate_resolved",
            EffectIntent { .. } => "effect_intent",
            EffectResult { .. } => "effect_result",
            InputCancelled { .. } => "input_cancelled",
            SessionStopped { .. } => "session_stopped",
            SessionRestored { .. } => "session_restored",
            TurnDone { .. } => "turn_done",
            TurnFailed { .. } => "turn_failed",
            TurnInterrupted { .. } => "turn_interrupted",
        }
    }
}

/// One event: where and when ([`Header`]) and what ([`EventKind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    #[serde(flatten)]
    pub header: Header,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    pub fn new(header: Header, kind: EventKind) -> Self {
        Self { header, kind }
    }

    pub fn id(&self) -> EventId {
        self.header.id
    }

    pub fn class(&self) -> Class {
        self.kind.class()
    }

    pub fn is_enduring(&self) -> bool {
        self.kind.class().is_enduring()
    }
}
