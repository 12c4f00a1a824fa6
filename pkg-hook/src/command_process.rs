//! Running one hook command: the envelope on its stdin, its output gathered, bounded by its
//! timeout, its whole process group killed when it overruns; and the [`Launcher`] seam
//! through which an embedder prepares and starts it (environment, confinement).

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The most bytes of a hook's stdout, and of its stderr, that are kept (the rest is read
/// and dropped, so a chatty hook cannot block on a full pipe or fill memory).
pub const OUTPUT_LIMIT: usize = 1 << 20;

/// How long the output pipes are still read after the hook exited: a background process
/// the hook left behind may hold them open, and must not hold the operation.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// A started hook command, as a [`Launcher`] hands it back.
pub type Launched = Pin<Box<dyn Future<Output = io::Result<Child>> + Send>>;

/// Prepares and starts hook commands: the seam where an embedder sets their environment
/// and confines them. The command it is given already has its program (`sh -c COMMAND`),
/// working directory, piped stdin/stdout/stderr and a process group of its own; it must
/// keep those.
///
/// ```
/// use treadle_hook::{Launched, Launcher};
///
/// /// Starts hooks with an empty environment but for PATH.
/// struct Clean;
///
/// impl Launcher for Clean {
///     fn launch(&self, mut command: tokio::process::Command) -> Launched {
///         command.env_clear().env("PATH", "/usr/bin:/bin");
///         Box::pin(async move { command.spawn() })
///     }
/// }
/// ```
pub trait Launcher: Send + Sync + 'static {
    fn launch(&self, command: Command) -> Launched;
}

/// Starts hook commands as they are, in treadle's own environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainLauncher;

impl Launcher for PlainLauncher {
    fn launch(&self, mut command: Command) -> Launched {
        Box::pin(async move { command.spawn() })
    }
}

/// How a hook command ended, with what it printed.
#[derive(Debug)]
pub(crate) struct Ran {
    pub end: End,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug)]
pub(crate) enum End {
    Exited(i32),
    Signaled(i32),
    TimedOut(Duration),
    NotStarted(io::Error),
}

/// Runs `sh -c command` in `cwd` with `stdin` on its standard input, through `launcher`.
pub(crate) async fn run(
    launcher: &dyn Launcher,
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    stdin: Vec<u8>,
    timeout: Duration,
) -> Ran {
    // An absolute path, so a launcher that sets PATH can still start it with posix_spawn.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match launcher.launch(cmd).await {
        Ok(child) => child,
        Err(error) => {
            return Ran {
                end: End::NotStarted(error),
                stdout: String::new(),
                stderr: String::new(),
            };
        }
    };
    let group = child.id();
    let input = child.stdin.take();
    let feed = tokio::spawn(async move {
        if let Some(mut input) = input {
            // A hook that does not read its stdin closes the pipe: that is its right.
            let _ = input.write_all(&stdin).await;
            let _ = input.shutdown().await;
        }
    });
    let stdout = tokio::spawn(read_capped(child.stdout.take()));
    let stderr = tokio::spawn(read_capped(child.stderr.take()));
    let end = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => end_of(status),
        Ok(Err(error)) => End::NotStarted(error),
        Err(_) => {
            kill_group(group);
            // The group is gone, so the wait returns at once.
            let _ = child.wait().await;
            End::TimedOut(timeout)
        }
    };
    feed.abort();
    Ran {
        end,
        stdout: drain(stdout).await,
        stderr: drain(stderr).await,
    }
}

fn end_of(status: ExitStatus) -> End {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => End::Exited(code),
        (None, Some(signal)) => End::Signaled(signal),
        // Neither a code nor a signal: report it as the impossible exit it is.
        (None, None) => End::Exited(-1),
    }
}

fn kill_group(pid: Option<u32>) {
    let group = pid
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw);
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return kept;
    };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
            }
        }
    }
}

async fn drain(reader: tokio::task::JoinHandle<Vec<u8>>) -> String {
    let abort = reader.abort_handle();
    match tokio::time::timeout(DRAIN_GRACE, reader).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Err(_)) => String::new(),
        Err(_) => {
            abort.abort();
            String::new()
        }
    }
}
