//! [`AgentError`]: why an agent step could not run at all.

use treadle_session::{RunError, StartError};

use super::mcp::McpToolsError;
use crate::template::TemplateError;
use crate::tools::{UnknownTool, WorkspaceError};

/// Why an agent step could not run at all. These are configuration or infrastructure
/// errors (exit code 2); a step that ran and failed is an [`AgentOutcome`](super::AgentOutcome) whose status says
/// why.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The step directory is unusable.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The grant names a tool that does not exist.
    #[error(transparent)]
    UnknownTool(#[from] UnknownTool),
    /// An MCP server did not start, or lacks a granted tool.
    #[error(transparent)]
    Mcp(#[from] McpToolsError),
    /// The session did not start (a missing API key variable, an unusable journal, ...).
    #[error("cannot start the agent session: {0}")]
    Start(#[from] StartError),
    /// The session stopped answering in the middle of the step.
    #[error("the agent session ended unexpectedly: {0}")]
    Session(#[from] RunError),
    /// A custom tool's `run:` is not a template treadle reads.
    #[error("a custom tool's `run:` cannot be read: {0}")]
    CustomTool(#[from] TemplateError),
    /// The conversation could not be restored on a `fallback:` source.
    #[error("cannot continue the conversation on the fallback model: {0}")]
    Restore(#[from] treadle_session::RestoreError),
    /// The session of the run a forked run forks could not be forked.
    #[error("cannot fork the agent session: {0}")]
    Fork(#[from] treadle_session::ForkError),
    /// A CLI-backed agent's CLI could not be run (a `super::cli::CliError`, boxed so that
    /// this file does not name the CLI module, which returns this error).
    #[error(transparent)]
    Cli(Box<dyn std::error::Error + Send + Sync>),
}
