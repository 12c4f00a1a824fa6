//! Running one hook command: the envelope on its stdin, its whole output read (to EOF, a
//! background process still holding it included), everything bounded by its timeout, and
//! every process it started stopped when it ends, overruns or is abandoned; and the
//! [`Launcher`] seam through which an embedder prepares, starts and stops it (environment,
//! confinement, a keeper process).

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

/// How long a stopped hook may take to end (and its output pipes to close) before its
/// process group is killed outright, and then how long its pipes are still read.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A started hook command, as a [`Launcher`] hands it back.
pub type Launched = Pin<Box<dyn Future<Output = io::Result<Child>> + Send>>;

/// Prepares, starts and stops hook commands: the seam where an embedder sets their
/// environment, confines them, and puts a keeper between itself and them. The command it
/// is given already has its program (`sh -c COMMAND`), working directory, piped
/// stdin/stdout/stderr and a process group of its own; it must keep those.
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

    /// Stops `child` (what [`Launcher::launch`] started) and every process it started,
    /// without waiting: called when the hook overruns its timeout, and when its run is
    /// abandoned (the operation's future dropped). It is not called for a child already
    /// reaped. The default kills the child's process group with SIGKILL; a launcher whose
    /// child is a supervisor of the command (one that kills the command's whole tree when
    /// asked) signals it instead.
    fn stop(&self, child: &Child) {
        kill_group(child.id());
    }

    /// Ends what the hook left running when it exited (it is reaped, and was process
    /// `pid`): called at once, so that a background process holding its output does not
    /// hold the verdict. The default kills its process group (a process that left the
    /// group, with `setsid`, is beyond its reach, and keeps the output open until the
    /// timeout, which then denies); a launcher whose supervisor ended the command's whole
    /// tree already does nothing.
    fn left_behind(&self, pid: u32) {
        kill_group(Some(pid));
    }
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
    /// It exited, but its output was still open (a process it left behind held it) when
    /// its timeout came: its answer may be incomplete.
    OutputOpen(Duration),
    NotStarted(io::Error),
}

/// A started hook: stopped through its launcher when dropped unreaped (the operation's
/// future dropped mid-hook), so that nothing it started outlives it.
struct Running<'a> {
    launcher: &'a dyn Launcher,
    child: Child,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        // `id()` is `None` once the child was reaped: nothing of it is left to stop.
        if self.child.id().is_some() {
            self.launcher.stop(&self.child);
        }
    }
}

/// Runs `sh -c command` in `cwd` with `stdin` on its standard input, through `launcher`.
///
/// The verdict is read from the hook's whole output: its stdout and stderr are read to
/// their end, also after it exited while a process it left behind still holds them. The
/// hook's exit and the end of its output must both come within `timeout`; otherwise it is
/// stopped and the run ends as [`End::TimedOut`] or [`End::OutputOpen`].
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
        .process_group(0);
    let child = match launcher.launch(cmd).await {
        Ok(child) => child,
        Err(error) => {
            return Ran {
                end: End::NotStarted(error),
                stdout: String::new(),
                stderr: String::new(),
            };
        }
    };
    let pid = child.id();
    let mut running = Running { launcher, child };
    let input = running.child.stdin.take();
    let feed = tokio::spawn(async move {
        if let Some(mut input) = input {
            // A hook that does not read its stdin closes the pipe: that is its right.
            let _ = input.write_all(&stdin).await;
            let _ = input.shutdown().await;
        }
    });
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (out_pipe, err_pipe) = (running.child.stdout.take(), running.child.stderr.take());
    let mut exited = false;
    let whole = async {
        let (status, (), ()) = tokio::join!(
            async {
                let status = running.child.wait().await;
                exited = status.is_ok();
                if let (true, Some(pid)) = (exited, pid) {
                    launcher.left_behind(pid);
                }
                status
            },
            read_capped(out_pipe, &mut stdout),
            read_capped(err_pipe, &mut stderr),
        );
        status
    };
    let end = match tokio::time::timeout(timeout, whole).await {
        Ok(Ok(status)) => end_of(status),
        Ok(Err(error)) => End::NotStarted(error),
        Err(_) => {
            // What was read so far is kept (for the report); the pipes were dropped with
            // the reads, so the hook's tree gets SIGPIPE if it writes on.
            stop(&mut running).await;
            if exited {
                End::OutputOpen(timeout)
            } else {
                End::TimedOut(timeout)
            }
        }
    };
    feed.abort();
    Ran {
        end,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Stops an overrunning hook through its launcher and waits for it; past [`STOP_GRACE`]
/// its process group is killed outright.
async fn stop(running: &mut Running<'_>) {
    if running.child.id().is_some() {
        running.launcher.stop(&running.child);
    }
    if tokio::time::timeout(STOP_GRACE, running.child.wait())
        .await
        .is_err()
    {
        kill_group(running.child.id());
        // The group is gone, so the wait returns at once.
        let _ = running.child.wait().await;
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

/// Reads `pipe` to its end into `kept`, keeping at most [`OUTPUT_LIMIT`] bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, kept: &mut Vec<u8>) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
            }
        }
    }
}
