//! The treadle runtime: sessions, loop actors, turns, inference, tools, journal and hub.
//!
//! The rules the runtime keeps (comments cite them as "rule N") are stated, each with the
//! proof that checks it, in `docs/rules.md`.
//!
//! # Layout
//!
//! * `session` and `builder`: the [`Session`] handle and its [`SessionBuilder`], the public face of the crate.
//! * `stream`: [`Session::stream`], one turn's events ending with its [`TurnReport`].
//! * `protocol`: the loop actor's messages (`LoopMsg`, `StepCommit`, turn coordinates);
//!   actor, turn and batch depend on it, never on each other.
//! * `actor`: the loop actor (ractor), sole writer of a loop's committed history.
//! * `context`: what every turn of a loop shares (model client, tools, hooks, hub).
//! * `turn`: the task that runs one turn, step by step, outside the actor.
//! * `batch`: runs a step's tool calls: arguments parsed and checked against the tool's
//!   JSON schema, authorized by the guards in call order, then run in parallel (at most
//!   `max_parallel_tools`), sequential tools alone, same write targets in call order.
//! * [`gate`]: permission gates for guards that answer `Ask`, and [`Session::respond_gate`].
//! * `subject`: the typed [`GateSubject`] of a tool-call gate, as journaled.
//! * `repair`: malformed tool-call arguments (fences, single quotes, unquoted keys,
//!   trailing commas, truncation) rewritten into the object meant, before anything reads them.
//! * `text_calls`: a text answer made only of tool calls (bare JSON, fenced, or in
//!   `<tool_call>` tags) taken as those calls.
//! * `repeats`: loop detection, the same tool call with the same result again and again.
//! * `approvals`: the remembered [`Approvals`] (`ApproveAlways`).
//! * `restore`: what restore reads from the journal (history, turns, open gates).
//! * `resume`: settles the in-flight turns restore found, resuming one parked on a gate.
//! * `delegate`: sub-agents, loops the main agent delegates to through a tool.
//! * `typed`: [`Session::ask`], answers in a typed shape.
//! * `error`: the typed errors of the session API, one enum per operation.
//! * [`inference`]: streaming chat completions from any OpenAI-compatible endpoint.
//! * [`tool`]: the [`Tool`] trait (with `sequential` and `write_target` for scheduling).
//! * [`mcp`]: tools served by MCP servers.
//! * [`journal`]: the durable, append-only event log on redb.
//! * `redact`: [`Secrets`], scrubbed from each assistant message where a turn materialises
//!   it (plain, reversed, hex, percent-encoded and base64 forms).
//! * [`hub`]: fan-out of events to subscribers.
//! * `trace`: the tracing spans (session, turn, model call, tool call, gate wait) and their
//!   GenAI semantic-convention fields.
//! * [`tls`]: the rustls crypto provider (*ring*) installed before any HTTPS client is built.

pub mod hub;
pub mod inference;
pub mod journal;
pub mod mcp;
pub mod tls;

mod actor;
mod approvals;
mod batch;
mod builder;
mod context;
mod delegate;
mod error;
pub mod gate;
mod protocol;
mod redact;
mod repair;
mod repeats;
mod restore;
mod resume;
mod session;
mod stream;
mod subject;
mod text_calls;
pub mod tool;
mod trace;
mod turn;
mod typed;

pub use approvals::Approvals;
/// Re-exported for implementing [`Tool`] and hooks by hand: `#[treadle_session::async_trait]`.
pub use async_trait::async_trait;
pub use builder::SessionBuilder;
pub use delegate::SubAgent;
pub use error::{GateError, RunError, SessionClosed, StartError, SubmitError};
pub use hub::{CatchUp, CatchUpItem, Subscription, SubscriptionLost};
pub use inference::{ApiKey, ModelConfig, RetryPolicy, StructuredOutput};
pub use journal::{Journal, JournalOptions};
pub use redact::Secrets;
pub use repair::repair_arguments;
pub use restore::RestoreError;
/// Re-exported so a tool's argument type can derive `JsonSchema` without naming another
/// version of the crate.
pub use schemars;
pub use session::{Session, TurnError, TurnOutcome, TurnReport};
pub use stream::{TurnItem, TurnStream};
pub use subject::{GateCall, GateRequest, GateScope, GateSubject};
pub use tool::{FnTool, Tool, ToolError, ToolResult};
pub use treadle_event as event;

/// The README's library snippet, compiled as a doc test so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeSnippet;
pub use treadle_event::GateAnswer;
pub use treadle_hook as hook;
pub use typed::AskError;
