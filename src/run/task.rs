//! Running a task's command: `sh -c` for a string, the program itself for `{ path, args }`.
//!
//! The command runs under a keeper (`crate::keeper`) in the step directory, confined to it
//! with Landlock where the kernel has it (`crate::confine`), with the allow-listed
//! environment (`crate::environ`) plus the step's `env`. Its output is streamed line by
//! line to the transcript and kept (a tail for the state file, stdout for asserts). On
//! timeout or Ctrl-C the keeper is stopped, and with it the command's whole tree, processes
//! that left its group included; when the command exits, the keeper kills whatever it left
//! running before it exits itself; when treadle dies, even by SIGKILL, the keeper does the
//! same.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::pipeline::RunSpec;
use crate::run::state_records::Streams;

/// Bytes of output kept for the state file.
pub const TAIL_BYTES: usize = 4096;

/// The last [`TAIL_BYTES`] of `text`, starting on a character boundary: what a step's
/// record keeps of its output (a task's, an agent's answer, an http step's body).
pub fn record_tail(text: &str) -> &str {
    end_of_text(text, TAIL_BYTES)
}

/// The last `bytes` of `text` (fewer when that would split a character).
fn end_of_text(text: &str, bytes: usize) -> &str {
    let mut cut = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    &text[cut..]
}

/// Bytes of the end of stdout (and of stderr) kept in a task's record, stream by stream
/// ([`Streams`]): what a workflow's shell step gives back. Enough for a command's result
/// or its error message; a longer result belongs in an output artifact.
pub const STREAM_END_BYTES: usize = 64 * 1024;
/// Bytes of stdout (and of stderr) kept for `assert: { stdout, output }`.
const STREAM_CAP: usize = 1 << 20;
/// How long the pipes may stay quiet after the command exited before its leftovers are
/// taken as all there is (a background child may hold them open).
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// The most time output may keep flowing after the command exited. Reading is paced by
/// whoever takes each line (a journal commit per line), so on a loaded machine the
/// leftovers of a command that printed fast can take longer than [`DRAIN_GRACE`] to drain:
/// the grace counts quiet time, up to this.
const DRAIN_MAX: Duration = Duration::from_secs(5);

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// It ran past its timeout and was killed.
    TimedOut(Duration),
    /// The run was interrupted and it was killed.
    Canceled,
}

/// What a command did.
#[derive(Debug, Clone)]
pub struct TaskResult {
    /// How it ended.
    pub end: TaskEnd,
    /// Its stdout (the first MiB).
    pub stdout: String,
    /// Its stderr (the first MiB), for `assert: { output }` and the failure's hints.
    pub stderr: String,
    /// The last few KiB of stdout and stderr, interleaved as printed.
    pub tail: String,
    /// The end of each stream, apart ([`STREAM_END_BYTES`] of each).
    pub streams: Streams,
}

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The program could not be executed.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for it failed.
    #[error("lost track of the command: {0}")]
    Wait(std::io::Error),
    /// Its confinement could not be prepared.
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
}

/// Everything needed to start a command.
pub struct TaskSpec<'a> {
    /// The command.
    pub run: &'a RunSpec,
    /// The step directory.
    pub dir: &'a Path,
    /// Variables added to the environment.
    pub env: &'a BTreeMap<String, String>,
    /// More variables (treadle's own, like `TREADLE_RUN`).
    pub extra_env: &'a [(String, String)],
    /// Variables inherited from treadle's environment besides the allow-list.
    pub pass_env: &'a [String],
    /// Whether the command's files are confined to `dir` (see `crate::confine`).
    pub confined: bool,
    /// What it may connect to (enforced confined or not).
    pub network: &'a crate::confine::grant::Network,
    /// Directories it may write besides `dir` (declared caches).
    pub caches: &'a [std::path::PathBuf],
}

/// The command of `spec`, its `argv[0]` when that is not its program, and its name.
fn command(spec: &TaskSpec<'_>) -> (Command, Option<&'static str>, String) {
    let (mut cmd, argv0, program) = match spec.run {
        RunSpec::Shell(line) => {
            // By its path when the command gets treadle's `PATH` (the child then makes one
            // `execve`, not one per `PATH` entry before `sh`'s); by name when the step sets
            // its own `PATH`, which may hold another `sh`. `$0` is `sh` either way.
            let own_path =
                spec.env.contains_key("PATH") || spec.extra_env.iter().any(|(k, _)| k == "PATH");
            let mut c = match own_path {
                true => Command::new("sh"),
                false => Command::new(crate::environ::sh()),
            };
            c.arg("-c").arg(line).current_dir(spec.dir);
            (c, Some("sh"), "sh".to_owned())
        }
        RunSpec::Exec(cfg) => {
            // A relative path with a slash means "in the step directory"; make it absolute
            // because which cwd a relative program is resolved against is unspecified.
            let program = if cfg.path.contains('/') && !cfg.path.starts_with('/') {
                spec.dir.join(&cfg.path).to_string_lossy().into_owned()
            } else {
                cfg.path.clone()
            };
            let mut c = Command::new(&program);
            c.args(&cfg.args);
            c.current_dir(
                cfg.dir
                    .as_ref()
                    .map_or_else(|| spec.dir.to_path_buf(), |d| spec.dir.join(d)),
            );
            (c, None, cfg.path.clone())
        }
    };
    crate::environ::set_command_env(
        &mut cmd,
        spec.pass_env,
        spec.env
            .iter()
            .chain(spec.extra_env.iter().map(|(k, v)| (k, v))),
    );
    // Its input, output and process group are the keeper's to set (`keeper::spawn`).
    (cmd, argv0, program)
}

/// How long a stopped keeper may take to kill its command's tree before its group is
/// killed outright.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Runs a command to its end, its timeout, or cancellation. `on_line` sees each line.
pub async fn run_task(
    spec: &TaskSpec<'_>,
    timeout: Option<Duration>,
    cancel: &CancellationToken,
    on_line: &(dyn Fn(&'static str, String) + Sync),
) -> Result<TaskResult, TaskError> {
    let (mut cmd, argv0, program) = command(spec);
    let policy = crate::confine::Policy {
        dir: spec.dir,
        files: spec.confined,
        network: spec.network,
        writable: spec.caches,
        readable: &[],
    };
    let confinement = crate::confine::for_keeper(&mut cmd, &policy)?;
    // Dropped mid-command (the step's future dropped), the keeper is told to stop.
    let mut kept = crate::keeper::spawn(cmd, argv0.map(std::ffi::OsStr::new), confinement)
        .await
        .map_err(|source| TaskError::Spawn { program, source })?;
    let child = &mut kept;
    let mut out = Output::default();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let work = pump(child, stdout, stderr, &mut out, on_line);
    let end = tokio::select! {
        r = work => r?,
        () = deadline => TaskEnd::TimedOut(timeout.unwrap_or_default()),
        () = cancel.cancelled() => TaskEnd::Canceled,
    };
    // Whatever ended the step, nothing of the command's tree may outlive it. A keeper that
    // exited has killed the tree already (and is reaped: `stop` then signals nothing).
    crate::keeper::stop_and_wait(child, STOP_GRACE).await;
    Ok(TaskResult {
        end,
        stdout: out.stdout,
        stderr: out.stderr,
        tail: out.tail,
        streams: out.ends.finish(),
    })
}

#[derive(Default)]
struct Output {
    stdout: String,
    stderr: String,
    tail: String,
    ends: Ends,
}

/// The ends of stdout and stderr as they are read, each trimmed to [`STREAM_END_BYTES`]
/// once it holds twice that (so a long output is not copied at every line).
#[derive(Default)]
struct Ends {
    stdout: String,
    stderr: String,
    cut: bool,
}

impl Ends {
    fn push(&mut self, stream: &'static str, line: &str) {
        let end = match stream {
            "stdout" => &mut self.stdout,
            _ => &mut self.stderr,
        };
        end.push_str(line);
        end.push('\n');
        if end.len() > 2 * STREAM_END_BYTES {
            let cut = end.len() - end_of_text(end, STREAM_END_BYTES).len();
            end.drain(..cut);
            self.cut = true;
        }
    }

    fn finish(self) -> Streams {
        let end = |text: &str| end_of_text(text, STREAM_END_BYTES).to_owned();
        let cut = self.cut
            || self.stdout.len() > STREAM_END_BYTES
            || self.stderr.len() > STREAM_END_BYTES;
        Streams {
            stdout: end(&self.stdout),
            stderr: end(&self.stderr),
            cut,
        }
    }
}

impl Output {
    fn push(&mut self, stream: &'static str, line: &str) {
        let kept = match stream {
            "stdout" => &mut self.stdout,
            _ => &mut self.stderr,
        };
        if kept.len() < STREAM_CAP {
            kept.push_str(line);
            kept.push('\n');
        }
        self.ends.push(stream, line);
        self.tail.push_str(line);
        self.tail.push('\n');
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = self.tail.len() - record_tail(&self.tail).len();
            self.tail.drain(..cut);
        }
    }
}

async fn pump(
    child: &mut crate::keeper::Kept,
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    out: &mut Output,
    on_line: &(dyn Fn(&'static str, String) + Sync),
) -> Result<TaskEnd, TaskError> {
    let mut o = stdout.map(BufReader::new);
    let mut e = stderr.map(BufReader::new);
    let (mut obuf, mut ebuf) = (Vec::new(), Vec::new());
    let mut status: Option<ExitStatus> = None;
    // Armed only once the command has exited (see the `grace` branch).
    let grace = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(grace);
    let mut drain_until: Option<tokio::time::Instant> = None;
    // After the exit, each line read gives the pipes another grace, up to `DRAIN_MAX`.
    let more_grace = |grace: std::pin::Pin<&mut tokio::time::Sleep>,
                      until: Option<tokio::time::Instant>| {
        if let Some(until) = until {
            grace.reset((tokio::time::Instant::now() + DRAIN_GRACE).min(until));
        }
    };
    loop {
        if o.is_none() && e.is_none() {
            if let Some(s) = status {
                return Ok(end_of(s));
            }
            return child.wait().await.map(end_of).map_err(TaskError::Wait);
        }
        tokio::select! {
            r = read_line(&mut o, &mut obuf), if o.is_some() => if let Some(line) = r {
                out.push("stdout", &line);
                on_line("stdout", line);
                more_grace(grace.as_mut(), drain_until);
            } else { o = None },
            r = read_line(&mut e, &mut ebuf), if e.is_some() => if let Some(line) = r {
                out.push("stderr", &line);
                on_line("stderr", line);
                more_grace(grace.as_mut(), drain_until);
            } else { e = None },
            s = child.wait(), if status.is_none() => {
                let s = s.map_err(TaskError::Wait)?;
                status = Some(s);
                let now = tokio::time::Instant::now();
                drain_until = Some(now + DRAIN_MAX);
                grace.as_mut().reset(now + DRAIN_GRACE);
            }
            () = &mut grace, if status.is_some() => {
                // The command is done; a background child still holds the pipes open.
                if let Some(s) = status { return Ok(end_of(s)); }
            }
        }
    }
}

// `read_until` is not cancel-safe on its own: bytes of a line read before another
// `select!` branch won stay in `buf`, so `buf` is only emptied once a line is taken.
async fn read_line(
    reader: &mut Option<BufReader<impl AsyncRead + Unpin>>,
    buf: &mut Vec<u8>,
) -> Option<String> {
    let r = reader.as_mut()?;
    let read = r.read_until(b'\n', buf).await;
    if matches!(read, Ok(0) | Err(_)) && buf.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(buf)
        .trim_end_matches(['\n', '\r'])
        .to_owned();
    buf.clear();
    Some(text)
}

fn end_of(status: ExitStatus) -> TaskEnd {
    match (status.code(), status.signal()) {
        (Some(code), _) => TaskEnd::Exited(code),
        (None, Some(sig)) => TaskEnd::Signaled(sig),
        (None, None) => TaskEnd::Exited(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::{TAIL_BYTES, record_tail};

    #[test]
    fn a_record_tail_starts_on_a_character_and_holds_at_most_tail_bytes() {
        // Every `é` is two bytes; with one byte of `x` after them, the cut falls inside one
        // and moves forward to the next.
        let text = format!("{}x", "é".repeat(TAIL_BYTES));
        let tail = record_tail(&text);
        assert_eq!(tail.len(), TAIL_BYTES - 1);
        assert!(tail.ends_with('x') && tail.starts_with('é'));
        assert_eq!(record_tail("short"), "short");
    }
}
