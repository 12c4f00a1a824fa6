//! The vocabulary of treadle: ids, coordinates, conversation content and events.
//!
//! This crate is a leaf. It depends on serde and nothing async, so a viewer, a hook plugin
//! or a storage tool can read treadle's events without pulling in a runtime.
//!
//! # Layout
//!
//! * [`ids`]: time-ordered identifiers (UUID v7) for sessions, loops, turns, steps, events,
//!   inputs and gates.
//! * [`content`]: messages and their blocks (text, reasoning, tool use, tool result) and
//!   token [`Usage`].
//! * [`event`]: the [`Event`] union, its [`Header`] of coordinates, and each kind's
//!   delivery [`Class`] and [`Scope`].
//! * [`filter`]: [`EventFilter`], which picks loops per delivery class, and [`Delivery`],
//!   what a subscription yields.
//! * [`fork`]: [`ForkLink`] and [`ForkPoint`], a forked session's parent and where it
//!   was forked, journaled with the fork's `SessionStarted`.
//!
//! # JSON encoding
//!
//! An event encodes as one flat JSON object: the header fields (`id`, `session`, `loop`,
//! `turn`, `step`, `at_ms`, `cause`) beside a `type` tag in snake case and the fields of
//! that kind. Fields that do not apply are omitted. The encoding is stable: new fields are
//! only ever added, and readers ignore fields they do not know.
//!
//! ```
//! use treadle_event::{Event, EventKind, Header, SessionId};
//!
//! let event = Event::new(
//!     Header::session(SessionId::new()),
//!     EventKind::SessionStopped { reason: "shutdown".into() },
//! );
//! let json = serde_json::to_string(&event).unwrap();
//! assert!(json.contains(r#""type":"session_stopped""#));
//! assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), event);
//! ```
//!
//! # Dependencies
//!
//! * `serde` / `serde_json`: the wire and journal encoding.
//! * `uuid` (v7): sortable, collision-free ids without a coordinator.
//! * `thiserror`: the typed parse error of ids.

pub mod content;
pub mod event;
pub mod filter;
pub mod fork;
pub mod ids;

pub use content::{Block, Message, Role, ToolUse, Usage};
pub use event::{
    Cause, Class, DeltaKind, Event, EventKind, FailureCause, GateAnswer, Header, ModelFailure,
    ParentLink, Scope, TerminalKind,
};
pub use filter::{Delivery, EventFilter, LoopScope};
pub use fork::{ForkLink, ForkPoint};
pub use ids::{EventId, GateId, IdParseError, InputId, LoopId, SessionId, StepId, TurnId};
