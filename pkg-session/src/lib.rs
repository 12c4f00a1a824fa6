//! An agent loop harness: a [`Session`] runs turns against any OpenAI-compatible endpoint,
//! calls your tools, lets hooks observe or veto every operation, and journals every
//! enduring event (on redb) before anyone sees it.
//!
//! # Quick start
//!
//! One turn with a custom tool, streamed as it happens. A turn ends in exactly one way;
//! [`TurnReport::answer`] makes a failed or interrupted turn an error.
//!
//! ```no_run
//! use treadle_session::prelude::*;
//!
//! #[schema] // Deserialize and JsonSchema, through treadle-session's serde and schemars
//! struct Add {
//!     a: i64,
//!     b: i64,
//! }
//!
//! # async fn demo() -> Result<(), Error> {
//! let session = Session::builder()
//!     .endpoint("http://127.0.0.1:8091/v1")
//!     .model("qwen2.5-coder-0.5b")
//!     .journal_path(".treadle/journal.redb") // or none: a temporary one
//!     .tool(FnTool::plain("add", "Adds two integers.", |x: Add| x.a + x.b))
//!     .start()
//!     .await?;
//! let mut turn = session.turn("What is 2 + 3?").stream().await?;
//! while let Some(item) = turn.next().await {
//!     match item? {
//!         TurnItem::Event(event) => {
//!             if let EventKind::TokenDelta { kind: DeltaKind::Text, text, .. } = &event.kind {
//!                 print!("{text}");
//!             }
//!         }
//!         TurnItem::End(report) => println!("\nanswer: {}", report.answer()?),
//!     }
//! }
//! session.shutdown().await; // or drop the last handle
//! # Ok(()) }
//! ```
//!
//! A turn starts one way, [`Session::turn`], whose [`TurnRequest`] says what to wait for:
//! `.stream()` as here, `.run()` for the report without the events, `.answer()` for the
//! text, `.ask::<T>()` for a typed answer, `.submit()` to queue it and return at once.
//!
//! Next: [`Session::subscribe`] and [`Session::subscribe_from`] (journaled events, a
//! [`CatchUpItem::CaughtUp`] mark, then live ones) for every event;
//! [`SessionBuilder::hook`] for a [`hook::Hook`] plugin (each call carries an operation id
//! and its start time) and [`hook::Policy`] for allow/deny/ask rules;
//! [`SessionBuilder::on_gate`] to answer the permission gates an `ask` opens;
//! [`SessionBuilder::restore`] to rebuild a session from its journal (which records a
//! `SessionRestored` event); [`SessionBuilder::fork`] for a new session whose history is
//! another's up to a committed [`ForkPoint`]. The runnable programs are in `examples/`, and
//! `docs/library.md` is the guide. The rules the runtime keeps are stated, each with the
//! proof that checks it, in `docs/rules.md` (comments cite them as "rule N").
//!
//! # Layout (public modules)
//!
//! * [`fence`]: [`WriteFence`], which an embedder uses to stop a session's journal appends
//!   once it no longer holds the right to write the session (a lease held elsewhere).
//! * [`inference`]: the model endpoint's configuration ([`ModelConfig`], [`ApiKey`],
//!   [`RetryPolicy`]) and its errors.
//! * [`journal`]: the durable, append-only event log on redb ([`Journal`], and the
//!   read-only [`JournalView`] a session hands out).
//! * [`gate`]: gates for guards that answer `Ask`, for `ask_human` questions
//!   ([`AskHuman`]) and for effectful calls a crash interrupted ([`Effect`],
//!   [`EffectPolicy`]), answered with [`Session::respond_gate`] or an `on_gate` handler.
//! * [`tool`]: the [`Tool`] trait and [`FnTool`], tools from plain functions, and the
//!   [`Footprint`] of a call (what it reads and writes), which orders a batch's calls.
//! * [`mcp`]: tools served by MCP servers.
//! * [`prelude`]: what most programs use, for `use treadle_session::prelude::*`.
//! * [`tls`]: the rustls crypto provider (*ring*) installed before any HTTPS client is built.
//! * [`event`] and [`hook`]: the `treadle-event` and `treadle-hook` crates, re-exported.
//!
//! Everything else ([`Session`], [`SessionBuilder`], [`TurnRequest`], [`TurnStream`],
//! [`Subscription`] and the [`CatchUp`] stream of [`Session::subscribe_from`], the session
//! errors and the umbrella [`Error`]) is at the crate root. The errors of one part live with it:
//! [`journal`]'s (`ReadError`, `JournalOpenError`, `AppendError`, `ImportError`, the
//! most used also at the root), [`inference`]'s, [`tool::ToolError`], [`hook::Denied`].
//! Every one converts into [`Error`].
//!
//! # Why these crates
//!
//! * Model calls go over **reqwest** directly, with an SSE decoder of our own
//!   (`inference/sse.rs`), not through async-openai: the request body and the chunk types
//!   were ours already, so async-openai carried only the transport, and its streaming path
//!   cost every call a spawned task, an unbounded channel, a parser allocating a `String`
//!   per line and per event, and a request rebuilt per attempt (issue 32 measured the
//!   harness at about 3x a bare reqwest loop in CPU per step, this among the largest
//!   parts). reqwest is what async-openai sat on; the call now reads the body in the
//!   caller's task.

pub mod fence;
pub mod inference;
pub mod journal;
pub mod mcp;
pub mod prelude;
pub mod tls;

// The private modules, for readers of the source:
// * `session` and `builder`: the `Session` handle and its `SessionBuilder`; the builder's
//   setters in `builder/mod.rs`, starting the client, journal, hub and loops in
//   `builder/launch.rs`.
// * `from_env`: `SessionBuilder::from_env`, endpoint, model and key from the environment.
// * `hub`: fan-out of a session's events to its subscribers (`Subscription`, `CatchUp`);
//   private, so that only the loop actor publishes (rule 2).
// * `turn_request`: `Session::turn` and its `TurnRequest`, the one way to start a turn:
//   modifiers (`choosing`, `seeded`) and the terminals `submit`, `run` and `answer`.
// * `stream`: `TurnRequest::stream`, one turn's events ending with its `TurnReport`.
// * `protocol`: the loop actor's messages (`LoopMsg`, `StepCommit`, turn coordinates);
//   actor, turn and batch depend on it, never on each other.
// * `actor`: the loop actor (ractor), sole writer of a loop's committed history.
// * `history`: `History`, a loop's history as the shared groups its steps committed (one
//   allocation per step for the history, the turn's request and the `StepDone`).
// * `compact`: long conversations: older turns summarised past the loop's budget
//   (journaled as `Compacted`), and the cap on one tool result's inline size.
// * `compaction`: the settings that bound a loop's history (budget, inline cap).
// * `context`: what every turn of a loop shares (model client, tools, hooks, hub).
// * `turn`: the task that runs one turn, step by step, outside the actor; a step's model
//   call in `turn/mod.rs`, its tool batch, loop detection and commit in `turn/tools.rs`,
//   a lone step's log sync overlapped with the next model call in `turn/overlap.rs`.
// * `batch`: runs a step's tool calls: arguments parsed and checked against the tool's
//   JSON schema, authorized by the guards in call order, then run in parallel (at most
//   `max_parallel_tools`), except that a call waits for the earlier calls it conflicts with;
//   preparing and authorizing in `batch/mod.rs`, running one call (its hooks, its effect's
//   intent and result journaled) in `batch/execute.rs`.
// * `footprint`: `Footprint` and `Place`, what a call reads and writes, and the batch's
//   dependency graph (which earlier calls each call waits for).
// * `batch_scope`: a tool call as the model wrote it and the scope its batch runs in,
//   shared by `batch` and `ask` (below both), with the effect result a step's commit
//   journals (`Deferred`).
// * `subject`: the typed `GateSubject` of a tool-call gate (its `GateKind`), as journaled.
// * `ask`: a batch asking through a gate (permission, a person's question, an unfinished
//   effect) and waiting for the answer.
// * `question`: `HumanQuestion`, what a person is asked and the check of an answer.
// * `human`: `AskHuman`, the built-in `ask_human` tool that asks a `HumanQuestion`.
// * `effect`: `Effect` (pure, idempotent, effectful) and the `EffectPolicy` restore applies
//   to an effectful call a crash interrupted (rule 11, exactly-once-effects).
// * `repair`: malformed tool-call arguments (fences, single quotes, unquoted keys,
//   trailing commas, truncation) rewritten into the object meant, before anything reads them.
// * `text_calls`: a text answer made only of tool calls (bare JSON, fenced, or in
//   `<tool_call>` tags) taken as those calls.
// * `validators`: tool-argument validators compiled once per process, shared by schema.
// * `interned`: `Interned`, the weak process-wide cache of what loops share (the
//   validators, the tools' specs).
// * `repeats`: loop detection, the same tool call with the same result again and again.
// * `approvals`: the remembered `Approvals` (`ApproveAlways`).
// * `restore`: what restore reads from the journal (history, turns, open gates).
// * `seed`: `SeededCall`, tool exchanges a turn starts with (`TurnRequest::seeded`).
// * `resume`: settles the in-flight turns restore found, resuming one parked on a gate.
// * `delegate`: sub-agents, loops the main agent delegates to through a tool.
// * `typed`: `TurnRequest::ask`, answers in a typed shape.
// * `error`: the typed errors of the session API, one enum per operation, and the
//   crate-private ones of a gate's opening and answer, an effect's record, a compaction.
// * `fork`: `SessionBuilder::fork`, a new session whose history is another's up to a
//   committed point (`ForkPoint`), written in one append by the fork's own hub; and
//   `JournalView::committed_turns`, the points a fork can name.
// * `any_error`: the umbrella [`Error`] that each operation's error converts into.
// * `redact`: `Secrets`, scrubbed from each assistant message where a turn materialises
//   it (plain, reversed, hex, percent-encoded and base64 forms).
// * `trace`: the tracing spans (session, turn, model call, tool call, gate wait) and their
//   GenAI semantic-convention fields.
mod actor;
mod any_error;
mod approvals;
mod ask;
mod batch;
mod batch_scope;
mod builder;
mod compact;
mod compaction;
mod context;
mod delegate;
mod effect;
mod error;
mod footprint;
mod fork;
mod from_env;
pub mod gate;
mod history;
mod hub;
mod human;
mod interned;
mod protocol;
mod question;
mod redact;
mod repair;
mod repeats;
mod restore;
mod resume;
mod seed;
mod session;
mod stream;
mod subject;
mod text_calls;
pub mod tool;
mod trace;
mod turn;
mod turn_request;
mod typed;
mod validators;

pub use any_error::Error;
pub use approvals::Approvals;
/// Re-exported for implementing [`Tool`] and hooks by hand: `#[treadle_session::async_trait]`.
pub use async_trait::async_trait;
pub use builder::SessionBuilder;
pub use delegate::SubAgent;
pub use effect::{Effect, EffectPolicy};
pub use error::{GateError, RunError, SessionClosed, StartError, SubmitError};
pub use fence::{Refused, WriteFence};
pub use fork::{CommittedTurn, ForkError};
pub use hub::{CatchUp, CatchUpItem, Subscription, SubscriptionLost};
pub use human::AskHuman;
pub use inference::{ApiKey, LimitNames, ModelConfig, RetryPolicy, StructuredOutput};
pub use journal::{ImportError, Journal, JournalOptions, JournalView};
pub use question::{AnswerError, HumanQuestion};
pub use redact::Secrets;
pub use repair::repair_arguments;
pub use restore::RestoreError;
/// Re-exported, with [`serde`] and [`serde_json`], so that a tool's argument type derives
/// `Deserialize` and `JsonSchema` with no other dependency: [`macro@schema`] does it in
/// one line.
pub use schemars;
pub use seed::SeededCall;
/// Re-exported for tool argument types and typed answers ([`macro@schema`] derives through it).
pub use serde;
/// Re-exported for the JSON values of tools, hooks and gate answers (`json!`).
pub use serde_json;
pub use session::{Session, TurnError, TurnOutcome, TurnReport};
pub use stream::{ToolCallView, ToolResultView, TurnItem, TurnStream};
#[allow(deprecated)]
pub use subject::{GateKind, GateQuestion, GateRequest};
pub use tool::{FnTool, Footprint, Place, Tool, ToolError, ToolResult};
pub use treadle_event as event;
/// Derives `Deserialize` and `JsonSchema` through this crate's re-exports, for a tool's
/// argument type or the answer of [`TurnRequest::ask`], so a user crate needs neither serde
/// nor schemars of its own:
///
/// ```no_run
/// #[treadle_session::schema]
/// struct Add {
///     /// The first term (doc comments become the schema's descriptions).
///     a: i64,
///     b: i64,
/// }
/// ```
pub use treadle_macros::schema;
pub use turn_request::{Chosen, ModelChooses, TurnRequest};

// The README's and docs/library.md's Rust blocks are compiled, with this crate's rustdoc
// examples, in a user crate by tests/library_examples.rs: a doctest here would see this
// crate's own dependencies (futures, serde, schemars), which a user's crate does not have.
pub use treadle_event::GateAnswer;
pub use treadle_event::{ForkLink, ForkPoint};
pub use treadle_hook as hook;
pub use typed::AskError;
