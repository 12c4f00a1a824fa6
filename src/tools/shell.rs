//! `run_shell`: one `sh -c` command in the step directory, with a timeout.
//!
//! The command runs under a keeper (`crate::keeper`), so a timeout stops everything it
//! started, not only the shell, and nothing it started outlives it or treadle. Like a task, it gets the allow-listed environment plus the step's
//! `env:`, and is confined to the step directory with Landlock where the kernel has it. A non-zero exit is a normal result that reports the code: the model
//! asked what happens, and a failing test run is an answer. Only a command that cannot be
//! started or that times out is a tool error.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use treadle_session::{Effect, FnTool, Tool, ToolError};

use super::Workspace;
use super::output::{MAX_OUTPUT_BYTES, truncate};

/// The timeout when the model gives none.
pub(super) const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// The longest timeout the model may ask for.
pub(super) const MAX_TIMEOUT_SECS: u64 = 600;
/// How long to wait for the output pipes to close after the command was killed; a process
/// that left the group could hold them open forever.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    /// The command, run by `sh -c` in the step directory.
    command: String,
    /// Seconds before the command is stopped (default 120, at most 600).
    #[serde(default)]
    timeout_secs: Option<u64>,
}

pub(super) fn run_shell(ws: Workspace) -> impl Tool {
    FnTool::new(
        "run_shell",
        "Run a shell command (sh -c) in the step directory. Reports the exit code, stdout and stderr.",
        move |args: ShellArgs| {
            let ws = ws.clone();
            async move { run(&ws, &args).await }
        },
    )
    // What it touches (the whole step directory) is declared by `targets::Declared`.
    // A command may do anything once (send, deploy, append): never repeated unasked.
    .effect(Effect::Effectful)
}

async fn run(ws: &Workspace, args: &ShellArgs) -> Result<String, ToolError> {
    let secs = args
        .timeout_secs
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
        .clamp(1, MAX_TIMEOUT_SECS);
    let ran = execute(ws, &args.command, Duration::from_secs(secs)).await?;
    let Some(status) = ran.status else {
        return Err(ToolError::new(truncate(
            format!(
                "command timed out after {secs}s and was stopped; pass a larger timeout_secs (at most {MAX_TIMEOUT_SECS}) or run less at once{}",
                sections(&ran.stdout, &ran.stderr)
            ),
            MAX_OUTPUT_BYTES,
            "",
        )));
    };
    // A refusal by the sandbox, explained (the model, like a user, cannot tell it apart).
    let hint = status
        .code()
        .filter(|c| *c != 0 && crate::confine::unavailable().is_none())
        .and_then(|c| {
            let said = format!("{}\n{}", ran.stderr, ran.stdout);
            crate::confine::denied::hint(c, &said, ws.root())
        })
        .map(|h| format!("\n{h}"))
        .unwrap_or_default();
    Ok(truncate(
        format!(
            "{}{hint}{}",
            describe(status),
            sections(&ran.stdout, &ran.stderr)
        ),
        MAX_OUTPUT_BYTES,
        "redirect the output to a file and search it",
    ))
}

/// What one command did.
pub struct Ran {
    /// How it exited; `None` when it timed out and was stopped.
    pub status: Option<ExitStatus>,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

/// Runs `sh -c SCRIPT` in the step directory the way `run_shell` does (its environment,
/// its confinement, a process group of its own), stopping the group after `limit`. Custom
/// tools run their commands through this too.
pub async fn execute(ws: &Workspace, script: &str, limit: Duration) -> Result<Ran, ToolError> {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script).current_dir(ws.root());
    crate::environ::set_command_env(&mut command, ws.pass_env(), std::iter::empty());
    for name in ws.hidden_env() {
        command.env_remove(name);
    }
    command.envs(ws.env().iter().map(|(k, v)| (k, v)));
    let network = ws.network();
    let policy = crate::confine::Policy {
        dir: ws.root(),
        files: ws.confined(),
        network: &network,
        writable: &[],
        readable: &[],
    };
    let confinement = crate::confine::for_keeper(&mut command, &policy)
        .map_err(|e| ToolError::new(e.to_string()))?;
    // A tool call caught by a crash is asked about when its session is restored; it must
    // not go on behind that question: its keeper stops it, and whatever it started, when
    // treadle dies.
    let mut kept = crate::keeper::spawn(command, None, confinement)
        .await
        .map_err(|e| ToolError::new(format!("cannot start sh: {e}")))?;
    let child = &mut kept;
    let stdout = tokio::spawn(read_all(child.stdout.take()));
    let stderr = tokio::spawn(read_all(child.stderr.take()));

    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => Some(status.map_err(|e| ToolError::new(format!("cannot wait for sh: {e}")))?),
        Err(_) => {
            crate::keeper::stop_and_wait(child, STOP_GRACE).await;
            None
        }
    };
    Ok(Ran {
        status,
        stdout: drain(stdout).await,
        stderr: drain(stderr).await,
    })
}

/// How a command exited, in words: `exit code: N` or `killed by signal N`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exit status unknown".to_owned(),
    }
}

fn sections(stdout: &str, stderr: &str) -> String {
    let mut out = String::new();
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        if !text.is_empty() {
            out.push_str(&format!("\n--- {name} ---\n{text}"));
        }
    }
    if out.is_empty() {
        out.push_str("\n(no output)");
    }
    out
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut pipe) = pipe {
        // What was read before an error is still worth showing.
        let _ = pipe.read_to_end(&mut buf).await;
    }
    buf
}

async fn drain(reader: tokio::task::JoinHandle<Vec<u8>>) -> String {
    match tokio::time::timeout(DRAIN_GRACE, reader).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}

/// How long a stopped keeper may take to kill the command's tree.
const STOP_GRACE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn args(command: &str) -> ShellArgs {
        ShellArgs {
            command: command.into(),
            timeout_secs: None,
        }
    }

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[tokio::test]
    async fn reports_exit_code_and_output() {
        let (_dir, ws) = setup();
        let out = run(&ws, &args("echo out; echo err >&2; exit 3"))
            .await
            .unwrap();
        assert_eq!(
            out,
            "exit code: 3\n--- stdout ---\nout\n\n--- stderr ---\nerr\n"
        );
        assert_eq!(
            run(&ws, &args("true")).await.unwrap(),
            "exit code: 0\n(no output)"
        );
    }

    #[tokio::test]
    async fn runs_in_the_step_directory_with_its_env() {
        let (_dir, ws) = setup();
        std::fs::write(ws.root().join("here.txt"), "x").unwrap();
        let ws = ws
            .with_env([("STEP_VAR".to_owned(), "v1".to_owned())])
            .hide_env(["PATH_TO_HIDE".to_owned(), "HOME".to_owned()]);
        let out = run(&ws, &args("ls; echo \"$STEP_VAR\"; echo \"home=$HOME\""))
            .await
            .unwrap();
        assert_eq!(out, "exit code: 0\n--- stdout ---\nhere.txt\nv1\nhome=\n");
    }

    #[tokio::test]
    async fn a_timeout_stops_the_whole_group() {
        let (_dir, ws) = setup();
        let started = Instant::now();
        let slow = ShellArgs {
            command: "echo before; sleep 30 & sleep 30; echo finished".into(),
            timeout_secs: Some(1),
        };
        let err = run(&ws, &slow).await.unwrap_err();
        assert!(err.0.starts_with("command timed out after 1s"), "{err}");
        assert!(err.0.contains("before"), "{err}");
        assert!(!err.0.contains("finished"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn long_output_is_truncated() {
        let (_dir, ws) = setup();
        let out = run(&ws, &args("yes line | head -n 20000")).await.unwrap();
        assert!(out.len() < MAX_OUTPUT_BYTES + 200);
        assert!(
            out.contains("[output truncated: showed"),
            "{}",
            &out[out.len() - 200..]
        );
    }
}
