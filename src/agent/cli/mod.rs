//! CLI-backed agents (`model: "@claude/sonnet"`): a coding-agent CLI runs the step's
//! conversation as a subprocess, and treadle keeps everything around it.
//!
//! The CLI owns its loop: its turns, its native tools, its context. treadle owns the step
//! directory, the key, `timeout:` (cancelling the step kills the CLI), `assert:`,
//! `verdicts:` and routing, and the transcript: the CLI's `stream-json` output is read as
//! it arrives and each text, tool call and result is shown as a hosted agent's would be
//! (live on the run page, recorded with the step), and the CLI's own `total_cost_usd` is
//! the step's cost.
//!
//! # Layout
//!
//! * `run`: [`run_cli_step`], the runs of one step (the first, then `--resume`).
//! * `command`: the command line and environment of one run, [`CliError`].
//! * `stream`: reading `stream-json` into events and the step's record.
//! * `bridge`: the loopback MCP server for the tools that are not the CLI's own.
//! * `tools`: the grant → native tool table, and names read back.
//!
//! # Decisions made here
//!
//! * The grant is the CLI's whole surface: `--tools` lists the native tools of the granted
//!   built-ins, `--permission-mode dontAsk` with `--allowedTools` approves exactly those
//!   (and the bridge), and `--strict-mcp-config` drops every MCP server but the bridge.
//! * Granted built-ins with no native counterpart (`ask_human`...), custom `run:` tools,
//!   `mcp:` grants and the `verdict` reach the CLI through the bridge: the same
//!   implementations a hosted agent's session runs, with the same secret masking.
//! * `HOME` is always a scratch directory in the step's temporary directory, removed when
//!   the step ends: `~/.claude` (user settings, hooks, plugins, a login) never applies,
//!   so credentials come from `api_key_env:` (forwarded as `ANTHROPIC_API_KEY`).
//!   `settings: project` loads the repository's own `.claude/` scope
//!   (`--setting-sources project`) and is part of the step's key.
//! * `source.endpoint:` becomes `ANTHROPIC_BASE_URL` (steps refuses the key; treadle uses
//!   it so a gateway or a local server can serve the CLI).
//! * A `budget: { usd: }` is handed to the CLI (`--max-budget-usd`, the CLI stops itself
//!   before the call that would go over) and checked again on its reported total.
//! * A run that ends without a file of `assert: files:` or without the verdict is woken
//!   again with `--resume` and told what is missing; so is a run that died without a
//!   result, told to continue. Both share `attempts + 5` runs.
//! * The prompt goes on stdin: the CLI's list options would take a trailing argument as
//!   one more list item.

mod bridge;
mod command;
mod run;
mod stream;
mod tools;

pub use command::{CLAUDE_BIN_ENV, CliError};
pub use run::run_cli_step;
pub use tools::CLAUDE_NATIVE;

/// What a CLI-backed step needs besides what every agent step has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliStep {
    /// `settings: project`: the repository's own CLI settings load.
    pub settings_project: bool,
    /// The step's `attempts:` (1 when unset).
    pub attempts: u32,
}
