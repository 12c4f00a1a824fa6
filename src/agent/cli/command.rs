//! The command line and environment of one run of a coding-agent CLI for a step, shared by
//! the CLIs: the grant as its whole tool surface (each CLI's own flags, in `claude` and
//! `codex`), the bridge as its only MCP server, no configuration scope but the project's
//! (and that only with `settings: project`), a scratch `HOME`, and of treadle's
//! environment only what a task gets.

use std::path::Path;

use super::driver::{Cli, CliError};
use super::proxy::Proxy;
use crate::agent::spec::AgentStep;

/// How this run joins the step's conversation.
pub enum Join<'a> {
    /// The first run, with the session id to give it (claude takes one; codex names its
    /// own, read from its first line).
    Start(&'a str),
    /// A later run, which rejoins the session the CLI reported.
    Resume(&'a str),
}

/// Everything one run needs besides its prompt (which goes on stdin, so that no option
/// that takes several values can swallow it).
pub struct Run<'a> {
    pub step: &'a AgentStep,
    pub cli: Cli,
    /// The model after `@cli/`.
    pub model: &'a str,
    pub program: &'a Path,
    pub home: &'a Path,
    /// The bridge's configuration as the CLI reads it ([`write_private`]).
    pub config: &'a Path,
    /// Whether any tool is bridged.
    pub bridged: bool,
    /// The model proxy: the CLI's endpoint and key.
    pub proxy: &'a Proxy,
    /// What is left of the tightest dollar budget.
    pub usd_left: Option<f64>,
    pub join: Join<'a>,
}

impl Run<'_> {}

/// The step's key, read from `api_key_env:`, when it names one that is set: for the
/// model proxy alone, never for the CLI's environment.
pub fn key(step: &AgentStep) -> Option<String> {
    step.model
        .api_key_env
        .as_deref()
        .and_then(crate::environ::var)
}

/// The step's `source.endpoint:`, when it has one.
pub fn endpoint(step: &AgentStep) -> Option<&str> {
    Some(step.model.base_url.as_str()).filter(|u| !u.is_empty())
}

/// Writes `text` to `path` (creating its directory), readable by its owner only: the
/// bridge's configuration holds the bridge's token.
pub fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| CliError::Home {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(err)
}
