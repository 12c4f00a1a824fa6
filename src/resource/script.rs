//! Running one script of a resource type: `sh -c` in its own process group, with the
//! allow-listed environment (`crate::environ`), confined with Landlock to a directory
//! (`crate::confine::spawn`, so without a `fork`), bounded by a timeout. Its whole stdout is kept (a check's JSON,
//! an out's version) and the tail of its stderr (for the error when it fails). Whatever
//! ends it, the process group is killed, so nothing it started outlives it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Bytes of stderr kept for an error message.
const STDERR_TAIL: usize = 2048;
/// The most stdout kept; a check printing more is cut (and its JSON then fails to parse).
const STDOUT_CAP: u64 = 16 << 20;

/// One script to run.
pub struct Script<'a> {
    /// The rendered script.
    pub text: &'a str,
    /// Its working directory.
    pub cwd: &'a Path,
    /// The directory it is confined to (`cwd` or a directory holding it).
    pub confine_to: &'a Path,
    /// Kill it after this long.
    pub timeout: Duration,
    /// Variables added to its environment.
    pub env: &'a [(String, String)],
    /// Variables of treadle's environment it gets by name (a type's `env:`).
    pub pass: &'a [String],
}

/// Why a script did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// `sh` could not be started.
    #[error("cannot start `sh`: {0}")]
    Spawn(std::io::Error),
    /// Its confinement could not be prepared.
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
    /// It exited non-zero (or was killed by a signal).
    #[error("exited with {status}{}", stderr_note(.stderr))]
    Exit {
        /// `code N` or `signal N`.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// It ran past its timeout and was killed.
    #[error("did not finish within {} and was killed (raise the type's `timeout:` if it needs longer)", humantime::format_duration(*.0))]
    TimedOut(Duration),
    /// The run was interrupted.
    #[error("interrupted")]
    Canceled,
}

fn stderr_note(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

/// Runs `script`; its stdout when it exits 0.
pub async fn run(script: &Script<'_>, cancel: &CancellationToken) -> Result<String, ScriptError> {
    let mut cmd = Command::new(crate::environ::sh());
    cmd.arg("-c").arg(script.text).current_dir(script.cwd);
    crate::environ::set_command_env(
        &mut cmd,
        script.pass,
        script.env.iter().map(|(k, v)| (k, v)),
    );
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = crate::confine::spawn(cmd, script.confine_to)
        .await
        .map_err(|e| match e {
            crate::confine::ConfineError::Start(e) => ScriptError::Spawn(e),
            other => ScriptError::Confine(other),
        })?;
    // Taken now: once waited for, the child no longer reports its id.
    let pid = child.id();
    let stdout = child.stdout.take().map(|o| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = o.take(STDOUT_CAP).read_to_end(&mut buf).await;
            buf
        })
    });
    let stderr = child.stderr.take().map(|e| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = e.take(STDOUT_CAP).read_to_end(&mut buf).await;
            buf
        })
    });
    let ended = tokio::select! {
        s = child.wait() => Ok(s.map_err(ScriptError::Spawn)?),
        () = tokio::time::sleep(script.timeout) => Err(ScriptError::TimedOut(script.timeout)),
        () = cancel.cancelled() => Err(ScriptError::Canceled),
    };
    kill_group(pid);
    let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    let collect = |h: Option<tokio::task::JoinHandle<Vec<u8>>>| async move {
        match h {
            Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Vec::new(),
        }
    };
    let out = String::from_utf8_lossy(&collect(stdout).await).into_owned();
    let err = String::from_utf8_lossy(&collect(stderr).await).into_owned();
    let status = ended?;
    if status.success() {
        return Ok(out);
    }
    use std::os::unix::process::ExitStatusExt;
    let status = match (status.code(), status.signal()) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "an unknown status".to_owned(),
    };
    let mut cut = err.len().saturating_sub(STDERR_TAIL);
    while !err.is_char_boundary(cut) {
        cut += 1;
    }
    Err(ScriptError::Exit {
        status,
        stderr: err[cut..].to_owned(),
    })
}

fn kill_group(id: Option<u32>) {
    if let Some(pid) = id
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // The group may already be gone; nothing to do then.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}
