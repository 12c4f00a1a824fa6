//! The command line and environment of one run of a coding-agent CLI for a step, shared by
//! the CLIs: the grant as its whole tool surface (each CLI's own flags, in `claude` and
//! `codex`), the bridge as its only MCP server, no configuration scope but the project's
//! (and that only with `settings: project`), a scratch `HOME`, and of treadle's
//! environment only what a task gets.

use std::path::{Path, PathBuf};

use super::driver::Cli;
use crate::agent::spec::AgentStep;

/// Why the CLI could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No CLI to run.
    #[error(
        "agent step `{step}` runs the {} CLI, which is not installed: put `{}` on PATH \
         (`npm install -g {}`) or set {} to its path",
        cli.name(), cli.name(), cli.package(), cli.bin_env()
    )]
    NotInstalled {
        /// The step.
        step: String,
        /// The CLI.
        cli: Cli,
    },
    /// A CLI treadle does not drive.
    #[error(
        "agent step `{step}` names the CLI `{cli}`, which treadle does not run; write `@claude/MODEL` or `@codex/MODEL`"
    )]
    UnknownCli {
        /// The step.
        step: String,
        /// The part before the slash.
        cli: String,
    },
    /// The scratch home or the bridge's configuration could not be written.
    #[error("cannot prepare the CLI's scratch home {path}: {source}")]
    Home {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bridge did not start.
    #[error(transparent)]
    Bridge(#[from] super::bridge::BridgeError),
    /// The process did not start, or could not be confined.
    #[error("cannot start the {} CLI for step `{step}`: {source}", cli.name())]
    Start {
        /// The step.
        step: String,
        /// The CLI.
        cli: Cli,
        /// Why.
        source: crate::confine::ConfineError,
    },
}

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
    /// What is left of the tightest dollar budget.
    pub usd_left: Option<f64>,
    pub join: Join<'a>,
}

impl Run<'_> {
    /// The command, with its arguments and environment, not yet started.
    pub fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(self.program);
        let mut env: Vec<(String, String)> = self.step.env.clone();
        env.push(("HOME".to_owned(), self.home.display().to_string()));
        let path_dirs = match self.cli {
            Cli::Claude => super::claude::command(self, &mut cmd, &mut env),
            Cli::Codex => super::codex::command(self, &mut cmd, &mut env),
        };
        // The CLI's own directories first on `PATH`, so that a confined CLI may read its
        // install (everything on `PATH` is readable to a confined command).
        let system_path = crate::environ::var("PATH").unwrap_or_default();
        let mut path: Vec<String> = path_dirs
            .iter()
            .filter(|d| d.is_absolute())
            .map(|d| d.display().to_string())
            .collect();
        path.push(system_path);
        env.push(("PATH".to_owned(), path.join(":")));
        crate::environ::set_command_env(
            &mut cmd,
            &self.step.pass_env,
            env.iter().map(|(k, v)| (k, v)),
        );
        cmd.current_dir(&self.step.dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// The step's key, read from `api_key_env:`, when it names one that is set.
    pub fn key(&self) -> Option<String> {
        self.step
            .model
            .api_key_env
            .as_deref()
            .and_then(crate::environ::var)
    }

    /// The step's `source.endpoint:`, when it has one.
    pub fn endpoint(&self) -> Option<&str> {
        Some(self.step.model.base_url.as_str()).filter(|u| !u.is_empty())
    }
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
