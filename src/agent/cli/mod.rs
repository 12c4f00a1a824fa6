//! CLI-backed agents (`model: "@claude/sonnet"`, `model: "@codex/gpt-5"`): a coding-agent
//! CLI runs the step's conversation as a subprocess, and treadle keeps everything around it.
//!
//! The CLI owns its loop: its turns, its native tools, its context. treadle owns the step
//! directory, the key, `timeout:` (cancelling the step kills the CLI), `assert:`,
//! `verdicts:` and routing, and the transcript: the CLI's output (claude's `stream-json`,
//! codex's `exec --json`) is read as it arrives and each text, tool call and result is
//! shown as a hosted agent's would be (live on the run page, recorded with the step).
//! The step's cost is its tokens priced as a hosted model's (`prices:`), unpriced without
//! a price: claude's own `total_cost_usd` is a guess from Anthropic's list, not a price.
//!
//! # Layout
//!
//! * `driver`: [`Cli`], which CLI a step names, its program and its native tools, and
//!   [`CliError`].
//! * `run`: [`run_cli_step`], the runs of one step (the first, then resumed ones).
//! * `command`: what the command line and environment of one run share.
//! * `launch`: a run's command, each CLI's arguments with what every run has.
//! * `claude`: claude's flags, environment and `--mcp-config`.
//! * `codex`: codex's flags, environment and scratch `config.toml`.
//! * `stream`: the step's transcript, and reading claude's `stream-json` into it.
//! * `codex_stream`: reading codex's JSONL events into it.
//! * `bridge`: the loopback MCP server for the tools that are not the CLI's own.
//! * `proxy`: the loopback proxy to the model, which holds the key.
//! * `tools`: the grant → native tool tables, and names read back.
//!
//! # Decisions made here
//!
//! * The grant is the CLI's whole surface. claude: `--tools` lists the native tools of
//!   the granted built-ins, `--permission-mode dontAsk` with `--allowedTools` approves
//!   exactly those (and the bridge), and `--strict-mcp-config` drops every MCP server but
//!   the bridge. codex: its shell is its one native tool, on only when `run_shell` is
//!   granted; its other tools that reach past the step are off in its configuration,
//!   and the bridge is its only MCP server.
//! * Granted built-ins with no native counterpart, custom `run:` tools, `mcp:` grants and
//!   the `verdict` reach the CLI through the bridge: the same implementations a hosted
//!   agent's session runs, with the same secret masking.
//! * `HOME` is always a scratch directory in the step's temporary directory, removed when
//!   the step ends (codex's `CODEX_HOME` is inside it): `~/.claude` and `~/.codex` (user
//!   settings, hooks, plugins, a login) never apply, so credentials come from
//!   `api_key_env:`. `settings: project` loads the repository's own scope (claude's
//!   `.claude/`, codex's `AGENTS.md` and hooks) and is part of the step's key.
//! * The model key stays in treadle: the CLI's base URL (`ANTHROPIC_BASE_URL`; codex's
//!   model provider, which speaks the Responses API) is the loopback `proxy`, with a key
//!   of the step's own; the proxy forwards to `source.endpoint:` (steps refuses the key,
//!   treadle uses it so a gateway or a local server can serve the CLI) with the real key.
//! * A confined CLI runs under [`crate::confine::cli`]: its grant's files (not the
//!   system's configuration), its step's `network:` besides treadle's proxy and bridge.
//! * A `budget: { usd: }` is handed to claude (`--max-budget-usd`, the CLI stops itself
//!   before the call that would go over) and checked again on its reported total; codex
//!   has no such limit and reports tokens once a run ends, so its budget is checked then.
//! * A run that ends without a file of `assert: files:` or without the verdict is woken
//!   again in the same session and told what is missing; so is a run that died without
//!   a result, told to continue. Both share `attempts + 5` runs.
//! * The prompt goes on stdin: claude's list options would take a trailing argument as
//!   one more list item.

mod bridge;
mod claude;
mod codex;
mod codex_stream;
mod command;
mod driver;
mod launch;
mod proxy;
mod run;
mod stream;
mod tools;

pub use crate::agent::spec::CliStep;
pub use driver::{CLAUDE_BIN_ENV, CODEX_BIN_ENV, Cli, CliError};
pub use run::run_cli_step;
pub use tools::{CLAUDE_NATIVE, CODEX_NATIVE};
