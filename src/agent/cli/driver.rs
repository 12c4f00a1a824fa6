//! [`Cli`]: which coding-agent CLI a step names (`@claude/MODEL`, `@codex/MODEL`), and
//! what differs between them outside their command lines: the program and the variable
//! that names it, the npm package, and the grant's native tools.

use std::path::PathBuf;

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
    /// The model proxy did not start.
    #[error(transparent)]
    Proxy(#[from] super::proxy::ProxyError),
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

// The agent's error boxes this one, so that its file does not name this module.
impl From<CliError> for crate::agent::error::AgentError {
    fn from(e: CliError) -> Self {
        Self::Cli(Box::new(e))
    }
}

/// The variable naming the claude CLI to run; without it, `claude` on `PATH`.
pub const CLAUDE_BIN_ENV: &str = "TREADLE_CLAUDE_BIN";
/// The variable naming the codex CLI to run; without it, `codex` on `PATH`.
pub const CODEX_BIN_ENV: &str = "TREADLE_CODEX_BIN";

/// A coding-agent CLI treadle drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// Claude Code (`@anthropic-ai/claude-code`), read as `stream-json`.
    Claude,
    /// The Codex CLI (`@openai/codex`), `codex exec --json`.
    Codex,
}

impl Cli {
    /// The CLI `step` names and the model after its slash; other CLIs are refused.
    pub fn of(step: &AgentStep) -> Result<(Self, &str), CliError> {
        match step.model.model.split_once('/') {
            Some(("@claude", model)) => Ok((Self::Claude, model)),
            Some(("@codex", model)) => Ok((Self::Codex, model)),
            other => Err(CliError::UnknownCli {
                step: step.name.clone(),
                cli: other
                    .map_or(step.model.model.as_str(), |(cli, _)| cli)
                    .to_owned(),
            }),
        }
    }

    /// The program's name on `PATH`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
        }
    }

    /// How a later run rejoins the session, as the CLI spells it.
    pub fn resume(self) -> &'static str {
        match self {
            Self::Claude => "--resume",
            Self::Codex => "exec resume",
        }
    }

    /// The variable that names the program.
    pub fn bin_env(self) -> &'static str {
        match self {
            Self::Claude => CLAUDE_BIN_ENV,
            Self::Codex => CODEX_BIN_ENV,
        }
    }

    /// The npm package that installs it.
    pub fn package(self) -> &'static str {
        match self {
            Self::Claude => "@anthropic-ai/claude-code",
            Self::Codex => "@openai/codex",
        }
    }

    /// Granted built-in → the CLI's own tool (see `tools`).
    pub fn natives(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Claude => &super::tools::CLAUDE_NATIVE,
            Self::Codex => &super::tools::CODEX_NATIVE,
        }
    }

    /// The CLI's tool for a granted built-in, when it has one.
    pub fn native(self, granted: &str) -> Option<&'static str> {
        self.natives()
            .iter()
            .find(|(ours, _)| *ours == granted)
            .map(|(_, theirs)| *theirs)
    }

    /// The program, per [`Cli::bin_env`] or `PATH`, with its links resolved: npm
    /// installs it behind a link in `node_modules/.bin`, and a confined CLI may read the
    /// directory of the file itself only. codex's npm entry is a node script that starts
    /// the native program of the platform's package; that program is run directly, so
    /// that neither node nor the other package need be readable.
    pub fn program(self, step: &str) -> Result<PathBuf, CliError> {
        let named = std::env::var_os(self.bin_env())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| crate::environ::find_program(self.name()))
            .ok_or_else(|| CliError::NotInstalled {
                step: step.to_owned(),
                cli: self,
            })?;
        let program = std::fs::canonicalize(&named).unwrap_or(named);
        Ok(match self {
            Self::Codex => codex_native(&program).unwrap_or(program),
            Self::Claude => program,
        })
    }
}

/// The native codex program behind the npm entry script
/// (`node_modules/@openai/codex/bin/codex.js` →
/// `node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`).
fn codex_native(entry: &std::path::Path) -> Option<PathBuf> {
    if entry.extension().is_none_or(|e| e != "js") {
        return None;
    }
    let (package, triple) = match std::env::consts::ARCH {
        "x86_64" => ("codex-linux-x64", "x86_64-unknown-linux-musl"),
        "aarch64" => ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
        _ => return None,
    };
    // bin/codex.js → @openai/codex → @openai; npm may also nest the platform package.
    let codex = entry.parent()?.parent()?;
    [
        codex.parent()?.join(package),
        codex.join("node_modules/@openai").join(package),
    ]
    .into_iter()
    .map(|p| p.join("vendor").join(triple).join("bin/codex"))
    .find(|p| p.is_file())
}
