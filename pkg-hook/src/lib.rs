//! The hook contract of treadle: operations, calls, outcomes, guards, and the runner that
//! orders them.
//!
//! A hook sees each operation of the runtime (a turn, a step, an inference, a tool call and
//! its execution, a gate wait, a journal append) twice: when it begins and when it finishes.
//! On a guard operation ([`Operation::is_guard`]: turn, inference, tool call) a hook may also
//! deny it. The runtime (`treadle-session`) owns a [`HookRunner`] and calls it around every
//! operation; this crate knows nothing of the runtime.
//!
//! # Layout
//!
//! * `call`: [`Operation`], the [`HookCall`] a hook is given with its [`Payload`], its
//!   [`OperationId`] and start time, and the [`OperationOutcome`] an operation ends with.
//! * `hook`: the [`Hook`] trait and the [`Decision`] a guard returns.
//! * `runner`: [`HookRunner`], which calls hooks in order, the in-flight [`Active`]
//!   operation, and the [`Denied`] error.
//! * `recorder`: [`Recorder`], a hook that records every [`Record`], for audit logs and the
//!   proofs of rule 5 (hook-order).
//! * `deny`: [`DenyTools`], the smallest guard policy.
//! * `policy`: [`Policy`], the rule-based tool-call guard users start from: ordered
//!   [`Rule`]s (tool-name glob, argument subset, argument regexes) with an [`Action`]
//!   (allow, deny, ask); first match wins; undecided calls are denied.
//! * `command`: [`CommandHook`], a hook that is a command speaking Claude Code's hook
//!   protocol (the same type `treadle`'s pipeline `hooks:` use), and the [`HookReport`]
//!   of each run.
//! * `command_spec`: what one command hook is: [`CommandSpec`] with its [`HookEvent`],
//!   [`Matcher`], timeout and [`OnHookError`].
//! * `command_protocol`: the envelope a hook reads on stdin and how its exit code and
//!   stdout are read ([`HookContext`] is the envelope's names and directories).
//! * `command_process`: running one command with its timeout and killing its process
//!   group, and the [`Launcher`] seam an embedder confines hooks through.
//!
//! # Ordering
//!
//! Hooks nest like scopes. [`HookRunner::begin`] calls `begin` in registration order;
//! [`Active::finish`] calls `finish` in reverse. When a hook denies a guard operation, the
//! hooks that already began (the denying one included) finish with [`OperationOutcome::Denied`] in
//! reverse, later hooks are not called at all, and `begin` returns [`Denied`]. A deny on an
//! operation that is not a guard is ignored and logged with `tracing`. Every begun operation
//! must be finished, also when it fails or is canceled (rule 5); an [`Active`] dropped
//! without finishing is reported on stderr in debug builds.
//!
//! With no hooks registered, `begin` and `finish` allocate nothing and await nothing, so the
//! runtime calls them unconditionally.
//!
//! # Writing a hook
//!
//! A complete plugin: it refuses the `shell` tool, and counts tool executions that
//! completed. Implement only the methods you need; both default to doing nothing.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use treadle_event::{LoopId, SessionId};
//! use treadle_hook::{
//!     async_trait, Decision, Hook, HookCall, HookRunner, Json, Operation, OperationOutcome, Payload,
//! };
//!
//! #[derive(Default)]
//! struct ToolMeter {
//!     completed: AtomicUsize,
//! }
//!
//! // `name()` defaults to the type's name, "ToolMeter".
//! #[async_trait]
//! impl Hook for ToolMeter {
//!     async fn begin(&self, call: &HookCall) -> Decision {
//!         match &call.payload {
//!             Payload::ToolCall { name, .. } if name == "shell" => {
//!                 Decision::deny("shell is not available here")
//!             }
//!             _ => Decision::Allow,
//!         }
//!     }
//!
//!     async fn finish(&self, call: &HookCall, outcome: &OperationOutcome, _output: Option<&Json>) {
//!         if call.op == Operation::ToolExecution && outcome.is_completed() {
//!             self.completed.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let meter = Arc::new(ToolMeter::default());
//! let runner = HookRunner::new(vec![meter.clone()]);
//! let (session, loop_id) = (SessionId::new(), LoopId::new());
//!
//! // The runtime asks before a tool call is authorized...
//! let shell = Payload::ToolCall {
//!     call_id: "c1".into(),
//!     name: "shell".into(),
//!     arguments: serde_json::json!({ "cmd": "ls" }),
//! };
//! let denied = runner.begin(HookCall::new(session, loop_id, shell)).await.unwrap_err();
//! assert_eq!(denied.to_string(), "denied by hook ToolMeter: shell is not available here");
//!
//! // ...and brackets each execution with begin and finish.
//! let read = Payload::ToolExecution {
//!     call_id: "c2".into(),
//!     name: "read_file".into(),
//!     arguments: serde_json::json!({ "path": "README.md" }),
//! };
//! let active = runner.begin(HookCall::new(session, loop_id, read)).await.unwrap();
//! active.finish(OperationOutcome::Completed, Some(serde_json::json!("# treadle"))).await;
//! assert_eq!(meter.completed.load(Ordering::Relaxed), 1);
//! # }
//! ```
//!
//! # Decisions made here
//!
//! * [`Decision`] is `#[non_exhaustive]`: hooks only construct decisions, so adding an
//!   answer breaks no plugin. [`Decision::Ask`] parks a tool call on a permission gate
//!   through [`HookRunner::authorize`]; [`HookRunner::begin`] has nobody to ask and denies
//!   it with [`APPROVAL_REQUIRED`] (fail closed, rule 7). Deny beats ask, ask beats allow. [`Operation`],
//!   [`Payload`] and [`OperationOutcome`] are exhaustive, because hooks match on them and rule 5 is
//!   stated over exactly these operations.
//! * [`HookRunner::observe`] is for notifications of things that already happened, so it
//!   ignores decisions even on guard operations.
//! * JSON: a [`HookCall`] encodes as `{"op", "session", "loop", "turn"?, "step"?, "payload"}`
//!   and its [`Payload`] carries a snake-case `kind` tag; [`OperationOutcome`] carries a `status` tag.
//! * A hook runs inline on the runtime's task and must not panic; a panic unwinds through
//!   the operation that called it.
//!
//! # Dependencies
//!
//! * `treadle-event`: the ids ([`SessionId`](treadle_event::SessionId), ...) in a call.
//! * `serde` / `serde_json`: calls, outcomes and records encode for audit logs, and
//!   inference requests and tool arguments are JSON values.
//! * `async-trait`: hooks are stored as `Arc<dyn Hook>`, and a trait with native `async fn`
//!   is not dyn-compatible (Rust 1.95 still cannot make `dyn Hook` of one), so the trait
//!   stays `#[async_trait]`; re-exported as [`macro@async_trait`] so plugins need not depend
//!   on it. A plugin writes `#[async_trait]` above its `impl` and nothing else.
//! * `thiserror`: the typed [`Denied`] error.
//! * `tracing`: the warning when a hook denies an operation that cannot be denied.
//! * `regex`: argument patterns in [`Policy`] rules (linear-time matching, so a policy
//!   from a pipeline file cannot make a guard hang).
//! * `tokio` (process, time, io): command hooks are child processes with a timeout, on
//!   the runtime the session already runs on.
//! * `rustix` (process): a hook that overruns its timeout is killed with its whole process
//!   group (`kill(-pgid)`), so a `sleep` it started does not hold its pipes open; the same
//!   crate `treadle` kills its tasks' groups with.
//! * `globset`: tool-name globs in [`Policy`] rules (ripgrep's glob matcher: well kept and
//!   widely used), instead of a hand-written matcher.

mod call;
mod command;
mod command_process;
mod command_protocol;
mod command_spec;
mod deny;
mod hook;
mod policy;
mod recorder;
mod runner;

pub use async_trait::async_trait;
/// Re-exported for building [`Payload`] arguments and reading outputs (`serde_json::json!`).
pub use serde_json;
/// The JSON an operation ends with ([`Hook::finish`]'s `output`) and a call's arguments:
/// `serde_json::Value`, re-exported so that a hook needs no `serde_json` dependency.
pub use serde_json::Value as Json;

#[allow(deprecated)]
pub use call::{HookCall, Operation, OperationId, OperationOutcome, Outcome, Payload};
pub use command::{CommandHook, HookEffect, HookReport, Reporter};
pub use command_process::{Launched, Launcher, OUTPUT_LIMIT, PlainLauncher};
pub use command_protocol::HookContext;
pub use command_spec::{
    BadMatcher, CommandSpec, DEFAULT_TIMEOUT, HookEvent, Matcher, OnHookError, UnknownEvent,
};
pub use deny::DenyTools;
pub use hook::{Decision, Hook};
pub use policy::{Action, ArgPattern, Policy, PolicyError, Rule};
pub use recorder::{Phase, Record, Recorder};
pub use runner::{APPROVAL_REQUIRED, Active, Authorization, Denied, HookRunner};
