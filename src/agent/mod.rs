//! The agent step: a `treadle_session::Session` that runs one turn in the step's directory,
//! with the tools its agent is granted, a forced verdict, a token budget and a price.
//!
//! # Use
//!
//! The executor builds an [`AgentStep`] from the pipeline once ([`AgentStep::build`]), keys
//! the step on [`AgentStep::key_view`], adds the directory and the job's budget
//! ([`AgentStep::in_dir`], [`AgentStep::with_job_budget`]), calls
//! [`run_agent_step`] with the shared journal, an [`AgentObserver`] that writes the
//! transcript and a cancellation token, and records the [`AgentOutcome`]. The step's asserts
//! are then checked with [`crate::assert::check_step`] over the outcome's facts.
//!
//! # Layout
//!
//! * `spec`: [`AgentStep`], the step's inputs (with [`Granted`] and [`Delegate`], which
//!   hold sub-agents' own steps).
//! * `spec_build`: reading a pipeline's agent step into an [`AgentStep`].
//! * [`cli`]: a CLI-backed agent (`@claude/MODEL`, `@codex/MODEL`): the CLI runs the
//!   conversation, treadle the step around it.
//! * `step`: [`run_agent_step`].
//! * [`commit`]: work kept only when committed: the rule of which artifacts are a git
//!   repository the run manages, and the commit on the run's branch or the wipe.
//! * `error`: [`AgentError`].
//! * `session_builder`: a step's settings made into its session (endpoint, key, tools,
//!   hooks, limits, who answers its gates), and the secret values it must never show.
//! * `turns`: the turns of a step on its session (prompt, reminders, the typed-output
//!   retry), and the `Sources` every `fallback:` source is driven with.
//! * `interrupt`: one turn, interrupted when the step is cancelled.
//! * `mcp`: starting and stopping the MCP servers a step's grant names.
//! * `verdict`: the `verdict` tool and the reminder when it was not called.
//! * `budget`: [`TokenBudget`], dollar budgets, and the guard hook that enforces them.
//! * `controls`: [`StepControls`] (permissions, typed output, confidence floor, dollar
//!   budgets) and the [`Asker`] that takes a question to a person.
//! * `typed_output`: `output_schema:` (prompt, check, retry message, the output file).
//! * `escalation`: when a verdict's confidence escalates and what that records.
//! * `failover`: `fallback:` mid-step, the next source continuing the conversation.
//! * `resumed`: a step whose session is restored (a worker took it over): its open gates
//!   asked, its first turn the one the restore resumed.
//! * `cost`: [`ModelPrice`], [`Cost`].
//! * [`preflight`]: probing every model and MCP server a job uses, before it runs.
//! * [`source_pick`]: the source an agent with `fallback:` starts a run on, when its
//!   primary cannot be reached before the first step.
//! * `observe`: [`AgentEvent`] and [`AgentObserver`], for the transcript.
//! * `timing`: each model call's start, first token and end, from the session's stamps.
//! * `forward`: the task that turns a session's event stream into [`AgentEvent`]s.
//! * `catch_up`: what a restored session committed that the run's transcript does not
//!   show yet (its process stopped before that part was synced), shown before it goes on.
//! * `hooks`: [`StepHooks`], the pipeline's command hooks (`hooks:`) made into
//!   `treadle_hook::CommandHook`s that start confined, without keys, and report to the
//!   transcript.
//! * `hook_order`: [`HookLines`](hook_order::HookLines), which places each hook's report
//!   in the transcript beside the session event it belongs to (its call's line or result),
//!   so the order is the same in every run.
//! * `record`: [`AgentOutcome`], [`RecordedCall`], [`AgentStatus`].
//! * [`context_files`]: `context_paths:` and `prompt_file: { artifact, path }`, read when
//!   the step runs.
//! * `granted`: [`Granted`], the grant's custom tools, `web_fetch` fence and sub-agents,
//!   read from the pipeline and keyed; built into session tools when the step runs.
//! * `custom_tool`: [`CustomTool`], a pipeline's command offered as a tool (`run:` with
//!   `{{ .args.NAME }}`, `args:` pinning, `max_calls:`), every argument shell-quoted.
//! * `required`: what a step owes before it may end (`required: true` custom tools, the
//!   files of `assert: files:`), and the reminder when the model stops short.
//! * `delegate`: the tool through which a step's model calls a sub-agent, which runs as a
//!   session of its own, nested under the step, on a share of the step's budget.
//! * `refuse`: what a step may be written with but treadle cannot run (a CLI other than
//!   claude, OAuth MCP servers), refused when it is built.
//!
//! # Decisions made here
//!
//! * As in steps, a missing verdict or required tool is forced through the endpoint's
//!   `tool_choice` on the reminder's first model call (`TurnRequest::choosing`): the tool
//!   by name, or the string `"required"` with `source.string_tool_choice:` (the default
//!   for `lmstudio/` and `ollama/`). The reminder text stays, for servers that ignore
//!   `tool_choice` (the bundled llama.cpp ignores the named form), and `max_turns` is the
//!   backstop. Only that one call is forced, so a forced call cannot repeat forever.
//! * Tool calls are read from the committed history after the turn, not from the live
//!   `ToolCall*` events, which are ephemeral and may be dropped for a slow subscriber.
//! * A budget is checked before each model call, so the step stops before the call that
//!   would begin over budget; the last call may still end above it. Dollar budgets are
//!   counted at the step's model price; a dollar budget for an unpriced model is a load
//!   error (it could never stop anything), and in the library the guard fails closed.
//! * Command hooks (`hooks:`) run after the budget guard and the `permissions:` policy,
//!   in the order written (those of `defaults:` first): a call a policy denies starts no
//!   hook process. A `pre_tool_use` hook's `ask` opens the same gate as `permissions:`.
//! * `permissions:` runs as the session's policy hook with the verdict tool always allowed;
//!   an `ask` opens the session's gate and the step's [`Asker`] answers it, so the session
//!   journals the question and the answer like any gate.
//! * A verdict below `min_confidence:` escalates after the turn: to another agent's model,
//!   which decides again with the same tools, then (still unsure, or `escalate_to: human`)
//!   to a person; an approval keeps the verdict, a rejection fails the step.
//! * The agent's API key variable is removed from `run_shell`'s environment, so a model
//!   cannot print the key it runs with.
//! * A sub-agent call is a session of its own on the same journal (its own stream), not a
//!   loop of the parent's session: it has its own model, endpoint and key, which a
//!   session's loops cannot. Its events reach the transcript as [`AgentEvent::Nested`]
//!   under the parent step, and its tokens are charged to the parent step.
//! * Custom tools quote every model-given value for the shell, with or without
//!   `| shellquote` in the template: a value is never run as code.

mod budget;
mod call_budget;
mod catch_up;
pub mod cli;
pub mod commit;
pub mod context_files;
pub mod controls;
mod cost;
mod custom_tool;
mod delegate;
mod error;
mod escalation;
mod failover;
mod forward;
mod granted;
mod hook_order;
mod hooks;
mod interrupt;
mod mcp;
mod observe;
pub mod preflight;
mod record;
mod refuse;
mod required;
mod resumed;
mod session_builder;
pub mod source_pick;
mod spec;
mod spec_build;
mod step;
mod timing;
mod turns;
mod typed_output;
mod verdict;

pub use budget::{BudgetScope, DollarBudget, TokenBudget};
pub use controls::{Answered, Asker, Question, QuestionKind, StepControls};
pub use cost::{Cost, ModelPrice, Prices, cost, find_price};
pub use custom_tool::{CustomSpec, CustomTool, Tally};
pub use error::AgentError;
pub use granted::DEFAULT_DELEGATE_PERCENT;
pub use hooks::StepHooks;
pub use mcp::{McpToolsError, MissingMcpTool};
pub use observe::{AgentEvent, AgentObserver, PREVIEW_BYTES, Quiet};
pub use record::{AgentOutcome, AgentStatus, EscalationRecord, RecordedCall};
pub(crate) use required::relative_to_dir;
pub(crate) use session_builder::secret_values;
pub use spec::{
    AgentStep, Answerer, BuildError, Conversation, DEFAULT_MAX_TURNS, Delegate, Dials, Granted,
};
pub use step::run_agent_step;
pub use verdict::{Chosen, VERDICT_TOOL};
