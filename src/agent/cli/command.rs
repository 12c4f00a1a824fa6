//! The command line and environment of one run of the claude CLI for a step: the grant as
//! its whole tool surface, the bridge as its only MCP server, no configuration scope but
//! the project's (and that only with `settings: project`), a scratch `HOME`, and of
//! treadle's environment only what a task gets.

use std::path::{Path, PathBuf};

use super::tools::{BRIDGE, native};
use crate::agent::spec::AgentStep;

/// The variable naming the claude CLI to run; without it, `claude` on `PATH`.
pub const CLAUDE_BIN_ENV: &str = "TREADLE_CLAUDE_BIN";

/// Why the CLI could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No CLI to run.
    #[error(
        "agent step `{step}` runs the claude CLI, which is not installed: put `claude` on PATH \
         (`npm install -g @anthropic-ai/claude-code`) or set {CLAUDE_BIN_ENV} to its path"
    )]
    NotInstalled {
        /// The step.
        step: String,
    },
    /// A CLI other than claude.
    #[error(
        "agent step `{step}` names the CLI `{cli}`, which treadle does not run; write `@claude/MODEL`"
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
    #[error("cannot start the claude CLI for step `{step}`: {source}")]
    Start {
        /// The step.
        step: String,
        /// Why.
        source: crate::confine::ConfineError,
    },
}

/// The CLI's program, per [`CLAUDE_BIN_ENV`], with its links resolved: npm installs it
/// behind a link in `node_modules/.bin`, and a confined CLI may read the directory of the
/// file itself only.
pub fn claude_program(step: &str) -> Result<PathBuf, CliError> {
    let named = std::env::var_os(CLAUDE_BIN_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| crate::environ::find_program("claude"))
        .ok_or_else(|| CliError::NotInstalled {
            step: step.to_owned(),
        })?;
    Ok(std::fs::canonicalize(&named).unwrap_or(named))
}

/// The model after `@claude/`; other CLIs are refused.
pub fn claude_model(step: &AgentStep) -> Result<&str, CliError> {
    match step.model.model.split_once('/') {
        Some(("@claude", model)) => Ok(model),
        other => Err(CliError::UnknownCli {
            step: step.name.clone(),
            cli: other
                .map_or(step.model.model.as_str(), |(cli, _)| cli)
                .to_owned(),
        }),
    }
}

/// How this run joins the step's conversation.
pub enum Join<'a> {
    /// The first run, which names the session.
    Start(&'a str),
    /// A later run, which rejoins it.
    Resume(&'a str),
}

/// Everything one run needs besides its prompt (which goes on stdin, so that no option
/// that takes several values can swallow it).
pub struct Run<'a> {
    pub step: &'a AgentStep,
    pub program: &'a Path,
    pub home: &'a Path,
    pub mcp_config: &'a Path,
    /// Names of the bridged tools (without the `mcp__treadle__` prefix).
    pub bridged: bool,
    /// What is left of the tightest dollar budget.
    pub usd_left: Option<f64>,
    pub join: Join<'a>,
}

impl Run<'_> {
    /// The command, with its arguments and environment, not yet started.
    pub fn command(&self) -> Result<tokio::process::Command, CliError> {
        let step = self.step;
        let mut cmd = tokio::process::Command::new(self.program);
        let natives: Vec<&str> = step.tools.iter().filter_map(|t| native(t)).collect();
        cmd.args(["--print", "--output-format", "stream-json", "--verbose"])
            .args(["--model", claude_model(step)?])
            // The grant is the whole built-in surface, each granted tool pre-approved and
            // anything else denied without a question nobody could answer.
            .arg("--tools")
            .arg(natives.join(","))
            .args(["--permission-mode", "dontAsk"])
            .arg("--strict-mcp-config")
            .arg("--mcp-config")
            .arg(self.mcp_config)
            .arg("--setting-sources")
            .arg(if step.cli.settings_project {
                "project"
            } else {
                ""
            });
        let mut allowed: Vec<String> = natives.iter().map(|t| (*t).to_owned()).collect();
        if self.bridged {
            allowed.push(format!("mcp__{BRIDGE}"));
        }
        if !allowed.is_empty() {
            cmd.arg("--allowedTools").arg(allowed.join(","));
        }
        if let Some(system) = &step.system {
            cmd.arg("--system-prompt").arg(system);
        }
        if let Some(usd) = self.usd_left {
            cmd.arg("--max-budget-usd")
                .arg(format!("{:.6}", usd.max(0.0)));
        }
        match self.join {
            Join::Start(id) => cmd.arg("--session-id").arg(id),
            Join::Resume(id) => cmd.arg("--resume").arg(id),
        };
        self.environment(&mut cmd);
        cmd.current_dir(&step.dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        Ok(cmd)
    }

    /// A task's environment (the allow-list, `pass_env:`, `env:`), with the CLI's own
    /// directory first on `PATH` (so a confined CLI may read its install), a scratch
    /// `HOME`, the endpoint and the key, and its updater, telemetry and other
    /// non-essential traffic off.
    fn environment(&self, cmd: &mut tokio::process::Command) {
        let step = self.step;
        let mut extra: Vec<(String, String)> = step.env.clone();
        let system_path = crate::environ::var("PATH").unwrap_or_default();
        let path = match self.program.parent().filter(|d| d.is_absolute()) {
            Some(dir) => format!("{}:{system_path}", dir.display()),
            None => system_path,
        };
        extra.push(("PATH".to_owned(), path));
        extra.push(("HOME".to_owned(), self.home.display().to_string()));
        for (k, v) in [
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ] {
            extra.push((k.to_owned(), v.to_owned()));
        }
        if !step.model.base_url.is_empty() {
            extra.push(("ANTHROPIC_BASE_URL".to_owned(), step.model.base_url.clone()));
        }
        if let Some(key) = step
            .model
            .api_key_env
            .as_deref()
            .and_then(crate::environ::var)
        {
            extra.push(("ANTHROPIC_API_KEY".to_owned(), key));
        }
        crate::environ::set_command_env(cmd, &step.pass_env, extra.iter().map(|(k, v)| (k, v)));
    }
}
