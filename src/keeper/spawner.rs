//! The spawner: a small process forked at the very start of `main` ([`start_spawner`]),
//! while treadle is one thread and a few megabytes, that starts every command's keeper
//! for it. A fork copies the page tables of the whole forking process and then pays a
//! copy-on-write fault for each page either side writes: forked from treadle in the middle
//! of a run, that cost grew with treadle's memory (a quarter of a fresh task's CPU in a
//! job of 1,000 tasks, docs/benchmarks.md). Forked from the spawner, it is small and the
//! same whatever treadle's size.
//!
//! For each command treadle sends the spawner a request on their socket pair (`wire`):
//! the program, arguments, environment and directory, the confinement's values, and the
//! command's stdout, stderr and Landlock rulesets as descriptors. The spawner clones the
//! keeper with `CLONE_PARENT` (`serve`): the keeper's parent is treadle itself, so
//! treadle waits for it (by a pidfd, `super::Kept`), signals it and stops it as a keeper
//! it forked, and the keeper's parent-death signal and its check of its parent's pid
//! watch treadle. That signal is sent when the *thread* that is the keeper's parent ends:
//! with `CLONE_PARENT` that is the parent of the spawner, the thread that called
//! [`start_spawner`], which is `main`'s thread: it lives as long as the process (a Rust
//! program ends when `main` returns, and `main`'s thread never exits alone).
//!
//! The spawner dies with treadle (its own parent-death SIGKILL, and the end of its
//! socket), holds no descriptor of treadle's but its socket (it closes every other at its
//! start; its 0 to 2 are `/dev/null`), shows no environment, and runs none of treadle's
//! code but this module's. Requests are one at a time (a lock around each exchange,
//! taken without blocking the runtime; the exchange runs on a blocking thread).
//!
//! When the spawner is gone (killed, say), the command being started fails with an error
//! saying so, and later commands fall back to forking treadle (`super::spawn`), which
//! keeps every guarantee at the old cost. A program that never called [`start_spawner`]
//! (a Rust workflow's, unless its `main` does) uses that fork path throughout.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::serve;
use super::wire::{self, Reply};
use crate::confine::Confinement;

/// Why no spawner was started; commands' keepers are then forks of this process.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    /// Threads exist already: a fork now could copy a lock another thread holds.
    #[error(
        "the spawner must start before any thread, and this process has {0}: call \
         treadle::keeper::start_spawner() first thing in main"
    )]
    Threads(usize),
    /// The kernel cannot watch a process by descriptor (`pidfd_open`, Linux 5.3).
    #[error("this kernel has no pidfd_open (Linux 5.3): {0}")]
    NoPidfd(io::Error),
    /// The socket pair or the fork failed.
    #[error("cannot start the spawner: {0}")]
    Start(io::Error),
}

/// Treadle's end of the socket, `None` once the spawner is gone.
type Link = Arc<tokio::sync::Mutex<Option<UnixStream>>>;

static LINK: OnceLock<Link> = OnceLock::new();

/// The spawner's pid, to reap it at the end ([`stop_spawner`]).
static PID: OnceLock<libc::pid_t> = OnceLock::new();

/// Set when the spawner is found gone: later commands fork treadle.
static GONE: AtomicBool = AtomicBool::new(false);

/// Starts the spawner (see the module's documentation). Call it first thing in `main`,
/// before any thread, runtime or client is made: `treadle`'s own `main` does, and a
/// program that runs pipelines or workflows through the library should, to start its
/// commands at the same cost. Calling it again does nothing. On an error, commands are
/// started as before, by forking this process (every guarantee holds either way).
pub fn start_spawner() -> Result<(), SpawnerError> {
    if LINK.get().is_some() {
        return Ok(());
    }
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, Iterator::count);
    if threads > 1 {
        return Err(SpawnerError::Threads(threads));
    }
    // SAFETY: getpid and pidfd_open with plain integers; the descriptor is owned at once.
    let probe = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0u32) };
    let probe = RawFd::try_from(probe).ok().filter(|fd| *fd >= 0);
    let Some(probe) = probe else {
        return Err(SpawnerError::NoPidfd(io::Error::last_os_error()));
    };
    // SAFETY: `probe` was just made and is owned by nothing else.
    drop(unsafe { OwnedFd::from_raw_fd(probe) });
    let (ours, theirs) = UnixStream::pair().map_err(SpawnerError::Start)?;
    // SAFETY: getpid, then fork(2) of this single-threaded process (checked above): the
    // child may use this memory as its own, and never returns from `spawner`.
    let treadle = unsafe { libc::getpid() };
    match unsafe { libc::fork() } {
        -1 => Err(SpawnerError::Start(io::Error::last_os_error())),
        0 => {
            drop(ours);
            spawner(theirs.into(), treadle)
        }
        pid => {
            drop(theirs);
            // Another call cannot have won: this process is single-threaded.
            let _ = LINK.set(Arc::new(tokio::sync::Mutex::new(Some(ours))));
            let _ = PID.set(pid);
            Ok(())
        }
    }
}

/// Ends the spawner and reaps it, so that its CPU time is counted in this process's
/// children's (what `time` and `wait4` report). Call it last in `main`, once no command
/// is being started; then commands start by forking this process. Without it the
/// spawner ends all the same when this process does (its socket closes).
pub fn stop_spawner() {
    let (Some(link), Some(pid)) = (LINK.get(), PID.get()) else {
        return;
    };
    // A command being started holds the socket: leave the spawner to end with us then.
    let Ok(mut socket) = link.try_lock() else {
        return;
    };
    GONE.store(true, Ordering::Relaxed);
    // Its end of the stream: the spawner exits at once.
    if socket.take().is_some() {
        reap(*pid);
    }
}

/// Whether commands' keepers are started by the spawner.
pub(super) fn running() -> bool {
    LINK.get().is_some() && !GONE.load(Ordering::Relaxed)
}

/// The spawner process: dies with treadle, keeps its socket only, and serves.
fn spawner(socket: OwnedFd, treadle: libc::pid_t) -> ! {
    // SAFETY: prctl, getppid, fcntl, close_range/close, open and _exit with plain
    // arguments on descriptors of this process; `take_keys` in this single-threaded
    // process.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != treadle {
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_NAME, c"treadle-spawner".as_ptr(), 0, 0, 0);
        // A group of its own: the terminal's Ctrl-C (or a kill of treadle's group) stops
        // treadle's steps, not the process that starts its commands. Not by ignoring the
        // signals: the keepers and commands would inherit that.
        libc::setpgid(0, 0);
        // Above 2, so that what it receives is too, and 0 to 2 can be `/dev/null`.
        let fd = libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            libc::_exit(1);
        }
        std::mem::forget(socket);
        let below = libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32);
        let above = libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
        if below != 0 || above != 0 {
            for other in (0..65_536).filter(|other| *other != fd) {
                libc::close(other);
            }
        }
        // Each command's standard input; 1 and 2 hold the numbers (never written to).
        for flags in [libc::O_RDONLY, libc::O_WRONLY, libc::O_WRONLY] {
            libc::open(c"/dev/null".as_ptr(), flags);
        }
        // The environment block (`/proc/PID/environ`) shows zeroes, and the process is
        // not dumpable, as treadle is: the block held treadle's keys when it forked.
        crate::environ::take_keys(std::iter::empty::<&str>());
        serve::serve(serve::Socket(OwnedFd::from_raw_fd(fd)), treadle)
    }
}

/// A keeper the spawner started: its pid (a child of this process) and the command's
/// output.
pub(super) struct Started {
    pub(super) pid: i32,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// Asks the spawner to start `cmd` under a keeper (see `super::spawn` for what `cmd` may
/// hold), `argv0` its `argv[0]` when not its program; returns once the command runs.
pub(super) async fn start(
    cmd: &tokio::process::Command,
    argv0: Option<&OsStr>,
    confinement: Confinement,
) -> io::Result<Started> {
    let Some(link) = LINK.get().filter(|_| running()) else {
        return Err(io::Error::other("no spawner"));
    };
    let cmd = cmd.as_std();
    let env: Vec<Vec<u8>> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            let mut entry = k.as_encoded_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v?.as_encoded_bytes());
            Some(entry)
        })
        .collect();
    let cwd = match cmd.get_current_dir() {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    };
    let argv = std::iter::once(argv0.unwrap_or(cmd.get_program())).chain(cmd.get_args());
    let argv: Vec<&OsStr> = argv.collect();
    let raw = confinement.raw();
    let request = wire::encode(
        &raw,
        cmd.get_program(),
        cwd.as_os_str(),
        argv.into_iter(),
        &env,
    )
    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in the command"))?;
    let (stdout, stdout_w) = pipe()?;
    let (stderr, stderr_w) = pipe()?;
    let mut socket = link.clone().lock_owned().await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut fds = vec![stdout_w.as_raw_fd(), stderr_w.as_raw_fd()];
        fds.extend(raw.rulesets.iter().filter(|fd| **fd >= 0));
        let started = exchange(&mut socket, &request, &fds);
        drop(socket);
        // Sent: the spawner holds its copies; treadle's go.
        drop((stdout_w, stderr_w, confinement));
        if let Err(Ok(pid)) = tx.send(started) {
            // The caller is gone (its future dropped): the command must not run unwatched.
            abandon(pid);
        }
    });
    let pid = rx
        .await
        .map_err(|_| io::Error::other("the spawner's exchange was cancelled"))??;
    Ok(Started {
        pid,
        stdout,
        stderr,
    })
}

/// One request and its reply; a broken socket marks the spawner gone.
fn exchange(
    socket: &mut Option<UnixStream>,
    request: &wire::Encoded,
    fds: &[RawFd],
) -> io::Result<i32> {
    let Some(stream) = socket.as_mut() else {
        return Err(gone("it ended earlier"));
    };
    let reply = wire::send(stream, request, fds).and_then(|()| Reply::read(stream));
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            *socket = None;
            GONE.store(true, Ordering::Relaxed);
            return Err(gone(&e.to_string()));
        }
    };
    match reply.error() {
        None => Ok(reply.pid),
        Some(err) => {
            if reply.pid > 0 {
                // The keeper exits at once when its command did not start; it is ours
                // to reap.
                reap(reply.pid);
            }
            Err(err)
        }
    }
}

fn gone(why: &str) -> io::Error {
    io::Error::other(format!(
        "the process that starts commands (treadle's spawner) is gone ({why}); the \
         commands after this one start without it"
    ))
}

/// Stops a keeper nobody waits for, and reaps it (blocking).
pub(super) fn abandon(pid: i32) {
    // SAFETY: kill(2) of our own child, not yet reaped (so its pid is not reused).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    reap(pid);
}

/// Waits for our child `pid` to end (blocking).
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid(2) of our own child, the status on this stack.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = io::pipe()?;
    Ok((r.into(), w.into()))
}
