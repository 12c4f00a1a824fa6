//! The treadle runtime: sessions, loop actors, turns, inference, tools, journal and hub.
//!
//! # Layout
//!
//! * `session` and `builder`: the [`Session`] handle and its [`SessionBuilder`], the public face of the crate.
//! * `actor`: the loop actor (ractor), sole writer of a loop's committed history.
//! * `turn`: the task that runs one turn, step by step, outside the actor.
//! * [`inference`]: streaming chat completions from any OpenAI-compatible endpoint.
//! * [`tool`]: the [`Tool`] trait (with `sequential` and `write_target` for scheduling).
//! * `batch`: runs a step's tool calls: arguments parsed and checked against the tool's
//!   JSON schema, authorized by the guards in call order, then run in parallel (at most
//!   `max_parallel_tools`), sequential tools alone, same write targets in call order.
//! * [`gate`]: permission gates for guards that answer `Ask` (journal shape documented
//!   there), [`Session::respond_gate`], and the remembered [`Approvals`].
//! * [`journal`]: the durable, append-only event log on redb.
//! * `redact`: [`Secrets`], scrubbed from each assistant message where a turn materialises
//!   it (plain, reversed, hex, percent-encoded and base64 forms).
//! * [`hub`]: fan-out of events to subscribers.

pub mod hub;
pub mod inference;
pub mod journal;
pub mod mcp;

mod actor;
mod batch;
mod builder;
mod context;
mod delegate;
mod error;
pub mod gate;
mod redact;
mod restore;
mod resume;
mod session;
pub mod tool;
mod turn;
mod typed;

pub use builder::{SessionBuilder, StructuredOutput};
pub use delegate::SubAgent;
pub use error::{RunError, SessionClosed, StartError, SubmitError};
pub use gate::{Approvals, GateError, GateResponse};
pub use hub::{Subscription, SubscriptionLost};
pub use inference::{ApiKey, ModelConfig, RetryPolicy};
pub use journal::{Journal, JournalOptions};
pub use redact::Secrets;
pub use restore::RestoreError;
pub use session::{Session, TurnOutcome, TurnReport};
pub use tool::{FnTool, Tool, ToolError};
pub use treadle_event as event;
pub use treadle_hook as hook;
pub use typed::AskError;
