//! The keeper: a small process between treadle and each command it runs for a step (a
//! task's, a `run_shell`'s), so that nothing the command starts outlives the command, its
//! step, or treadle itself, even when treadle is killed with SIGKILL.
//!
//! A process group is not enough: a command's children may leave it (`setsid`, a double
//! fork), and when treadle is killed outright it cannot kill anything. So [`spawn`] starts
//! a *keeper* instead of the command, a child of treadle, which:
//!
//! * becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): every process of the command's
//!   tree that loses its parent is reparented to the keeper, not to init, however it left
//!   the group;
//! * asks for a signal when treadle dies (`PR_SET_PDEATHSIG`);
//! * forks the command (which gets a process group of its own and a parent-death SIGKILL
//!   of its own, then confines itself and keeps only its descriptors 0 to 2,
//!   `life::confine_command`), closes every descriptor it holds, and waits.
//!
//! Who makes the keeper: the spawner (`spawner`), a small process forked first thing in
//! `main` ([`start_spawner`]), clones it as treadle's child, so that starting a command
//! never copies treadle's memory, whatever its size. A program that links the library
//! without starting the spawner (a Rust workflow's), or whose spawner is gone, forks
//! itself instead, the keeper set up between fork and exec by the same code (`life`);
//! hooks always do ([`keep`]), their starting thread being confined already.
//!
//! When the command exits, when treadle asks it to stop (SIGTERM, see [`stop`]), or when
//! treadle is gone (its parent changed), the keeper kills the command's group, then kills
//! its own children round after round (each round's orphans are its children in the next)
//! until it has none, and exits as the command did. The keeper runs no code but system
//! calls on its stack once it lives (a fork of treadle is a copy of a multi-threaded
//! process), and holds no descriptor, so the state file's lock and the command's pipes are
//! not kept open by it.
//!
//! Submodules: `life` (the keeper's life: become one, fork the command, watch, sweep),
//! `spawner` (the spawner: starting it, and treadle's requests to it), `serve` (the
//! spawner's side: its loop, the keeper's clone, the command's exec), `wire` (what the
//! two say on their socket).
//!
//! What it cannot stop: a keeper killed with SIGKILL itself (treadle never sends it one
//! while it waits for it). The command still dies then (its parent-death signal), its
//! orphans go to init; for those, and for the moments between treadle's death and the
//! keeper's sweep, [`stop_leftovers`] finds a run's processes by the [`MARK`] variable in
//! their environment and kills them (`treadle run --resume` does, before any step runs).
//! A process that clears its environment and escapes the keeper as well is not found.
//!
//! The keeper lists its children in `/proc/thread-self/children` (Linux 3.17, with
//! `CONFIG_PROC_CHILDREN`, which distributions enable). Without it, it kills the command's
//! group only, as treadle did before the keeper.

mod life;
mod serve;
mod spawner;
mod wire;

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

pub use spawner::{SpawnerError, start_spawner, stop_spawner};

use crate::confine::Confinement;

/// The variable every command of a run gets, holding [`mark`]: how [`stop_leftovers`]
/// finds the run's processes after treadle died.
pub const MARK: &str = "TREADLE_RUN_MARK";

/// The value of [`MARK`] for run `run` of the state file `state`: the same in every
/// process that opens that file, and different for every other run or state file.
pub fn mark(state: &Path, run: u64) -> String {
    // Every command of a run asks; the path is resolved (a `readlink` per component) once.
    static LAST: std::sync::Mutex<Option<(std::path::PathBuf, u64, String)>> =
        std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((path, r, mark)) = last.as_ref()
        && path == state
        && *r == run
    {
        return mark.clone();
    }
    let canonical = std::fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
    let hash = blake3::hash(canonical.as_os_str().as_encoded_bytes());
    let mark = format!("{}-{run}", &hash.to_hex()[..16]);
    *last = Some((state.to_path_buf(), run, mark.clone()));
    mark
}

/// Starts `cmd` under a keeper, the command confined by `confinement` (made by
/// `crate::confine::for_keeper` for `cmd`), `argv0` its `argv[0]` when not its program
/// (see the module's documentation). The command's input is `/dev/null`, its stdout and
/// stderr pipes ([`Kept::stdout`], [`Kept::stderr`]); its environment is exactly the one
/// set on `cmd`, which must be cleared first (`crate::environ::set_command_env`), and its
/// directory `cmd`'s. Other settings of `cmd` (its stdio, a process group, `pre_exec`
/// work) are not for this function: the keeper gets a group of its own, out of reach of
/// the terminal's Ctrl-C. Returns once the command runs, or with why it could not start
/// (its program missing, its confinement refused). Within a tokio runtime.
pub(crate) async fn spawn(
    mut cmd: tokio::process::Command,
    argv0: Option<&OsStr>,
    confinement: Confinement,
) -> io::Result<Kept> {
    if spawner::running() {
        let started = spawner::start(&cmd, argv0, confinement).await?;
        let pid = started.pid;
        return Kept::spawned(started).inspect_err(|_| {
            // Started, but it cannot be watched: it must not run unwatched.
            tokio::task::spawn_blocking(move || spawner::abandon(pid));
        });
    }
    // The fork of treadle: no spawner in this program, or it is gone.
    if let Some(argv0) = argv0 {
        cmd.arg0(argv0);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let raw = confinement.raw();
    fork_keeper(&mut cmd, raw.own_pids, move |pids| {
        // SAFETY: in the command between fork and exec (`fork_keeper`'s contract).
        unsafe { life::confine_command(pids, &raw) }
    });
    let child = cmd.spawn();
    // The rulesets were inherited by the command (or it failed); treadle's copies go.
    drop(confinement);
    Ok(Kept::forked(child?))
}

/// Makes the process `cmd` starts a keeper of the command by forking treadle (hooks, whose
/// spawning thread is confined already; see [`spawn`] for commands treadle confines).
/// Call it before any other `pre_exec` work of `cmd`: that work then runs in the command
/// only. `cmd` should have `process_group(0)` and no `kill_on_drop` (the keeper is
/// stopped instead).
pub(crate) fn keep(cmd: &mut tokio::process::Command, own_pids: bool) {
    fork_keeper(cmd, own_pids, |pids| {
        // SAFETY: in the command between fork and exec.
        unsafe {
            crate::confine::pid::map_user(pids)?;
            life::only_stdio();
        }
        Ok(())
    });
}

/// Between fork and exec of `cmd`: becomes the keeper and forks the command, in which
/// `then` runs before the exec; the keeper never returns.
fn fork_keeper(
    cmd: &mut tokio::process::Command,
    own_pids: bool,
    then: impl Fn(crate::confine::pid::Pids) -> io::Result<()> + Send + Sync + 'static,
) {
    let treadle = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes system calls only, allocates nothing
    // (`then` neither, by its callers' contract), and in the keeper never returns (it
    // ends with `_exit`).
    unsafe {
        cmd.pre_exec(move || match life::begin(treadle, own_pids)? {
            life::Begun::Command(pids) => then(pids),
            life::Begun::Keeper { command, set } => life::live(command, treadle, &set),
        });
    }
}

/// A started keeper, stopped when dropped (a step's future dropped mid-command, say),
/// where `kill_on_drop` would SIGKILL the keeper and leave its command's orphans.
pub(crate) struct Kept {
    how: How,
    /// The command's stdout, until taken.
    pub(crate) stdout: Option<tokio::process::ChildStdout>,
    /// The command's stderr, until taken.
    pub(crate) stderr: Option<tokio::process::ChildStderr>,
}

/// How a keeper is watched: as tokio's child (a fork of treadle), or by a pidfd (cloned
/// by the spawner: a child of treadle tokio did not start).
enum How {
    Forked(tokio::process::Child),
    Spawned {
        pid: i32,
        pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
        status: Option<ExitStatus>,
    },
}

impl Kept {
    fn forked(mut child: tokio::process::Child) -> Kept {
        Kept {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            how: How::Forked(child),
        }
    }

    fn spawned(started: spawner::Started) -> io::Result<Kept> {
        // SAFETY: pidfd_open(2) of our own unreaped child (its pid cannot be reused until
        // we reap it); the descriptor is owned at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, started.pid, 0u32) };
        let pidfd = match libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0) {
            // SAFETY: just made, owned by nothing else.
            Some(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
            None => return Err(io::Error::last_os_error()),
        };
        let output = |fd: OwnedFd| std::process::ChildStdout::from(fd);
        Ok(Kept {
            stdout: Some(tokio::process::ChildStdout::from_std(output(
                started.stdout,
            ))?),
            stderr: Some(tokio::process::ChildStderr::from_std(
                std::process::ChildStderr::from(started.stderr),
            )?),
            how: How::Spawned {
                pid: started.pid,
                pidfd: watch(pidfd)?,
                status: None,
            },
        })
    }

    /// The keeper's pid, `None` once it has been reaped.
    pub(crate) fn id(&self) -> Option<u32> {
        match &self.how {
            How::Forked(child) => child.id(),
            How::Spawned {
                pid, status: None, ..
            } => u32::try_from(*pid).ok(),
            How::Spawned { .. } => None,
        }
    }

    /// Waits for the keeper to exit (as its command did), and reaps it. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.how {
            How::Forked(child) => child.wait().await,
            How::Spawned {
                status: Some(status),
                ..
            } => Ok(*status),
            How::Spawned { pid, pidfd, status } => loop {
                let mut ready = pidfd.readable().await?;
                let mut raw = 0;
                // SAFETY: waitpid(2) of our own child, the status on this stack.
                let reaped = unsafe { libc::waitpid(*pid, &mut raw, libc::WNOHANG) };
                if reaped == *pid {
                    let exit = ExitStatus::from_raw(raw);
                    *status = Some(exit);
                    return Ok(exit);
                }
                if reaped < 0 {
                    return Err(io::Error::last_os_error());
                }
                ready.clear_ready();
            },
        }
    }
}

/// A pidfd registered with the runtime, readable once its process has ended.
fn watch(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: an `OwnedFd` is a valid descriptor, closed only when the `AsyncFd` drops it.
    Ok(unsafe { tokio::io::unix::AsyncFd::register_with_interest(pidfd, interest) }?)
}

impl Drop for Kept {
    fn drop(&mut self) {
        signal(self.id());
        // A keeper treadle cloned and nobody waits for: reaped once it ends (tokio does
        // this for its own children).
        if let How::Spawned {
            pid,
            pidfd,
            status: None,
        } = &self.how
        {
            let pid = *pid;
            let Ok(fd) = pidfd.get_ref().try_clone() else {
                return;
            };
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Ok(fd) = watch(fd) {
                        let _ = fd.readable().await;
                    }
                    let mut raw = 0;
                    // SAFETY: waitpid(2) of our own child, the status on this stack.
                    unsafe { libc::waitpid(pid, &mut raw, libc::WNOHANG) };
                });
            }
        }
    }
}

/// Signals a keeper treadle forked itself (a hook's, [`keep`]): SIGTERM, which stops its
/// command's whole tree, and then it.
pub(crate) fn stop(child: &tokio::process::Child) {
    signal(child.id());
}

/// Sends SIGTERM to the keeper `pid` (`None`: already reaped, nothing to signal).
fn signal(pid: Option<u32>) {
    if let Some(pid) = pid
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // It may be gone already; nothing to do then.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Stops a keeper and waits (at most `grace`) for it, and with it the command's tree, to
/// be gone; past `grace` its process group is killed outright.
pub(crate) async fn stop_and_wait(child: &mut Kept, grace: Duration) {
    signal(child.id());
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(pid) = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = tokio::time::timeout(grace, child.wait()).await;
    }
}

/// Why a run's leftover processes could not all be stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeftoverError {
    /// `/proc` cannot be listed.
    #[error("cannot look for processes of the earlier run in /proc: {0}")]
    Proc(io::Error),
    /// Some are still alive after SIGKILL and the wait.
    #[error(
        "processes of the earlier run are still alive after SIGKILL and {waited:?}: {pids:?}; \
         stop them (kill -9), then run again"
    )]
    StillAlive {
        /// Their ids.
        pids: Vec<u32>,
        /// How long they were waited for.
        waited: Duration,
    },
}

/// Kills every process whose environment holds `MARK=mark` (other than this one) and waits,
/// at most `wait`, until none is left. Returns how many were found. A process that is
/// already a zombie shows no environment and is not counted: it runs nothing any more.
pub fn stop_leftovers(mark: &str, wait: Duration) -> Result<usize, LeftoverError> {
    let entry = format!("{MARK}={mark}");
    let started = Instant::now();
    let mut found = std::collections::BTreeSet::new();
    loop {
        let alive = marked(entry.as_bytes()).map_err(LeftoverError::Proc)?;
        if alive.is_empty() {
            return Ok(found.len());
        }
        for &pid in &alive {
            found.insert(pid);
            if let Some(p) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        if started.elapsed() >= wait {
            return Err(LeftoverError::StillAlive {
                pids: alive,
                waited: wait,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes (not this one) whose environment has the entry `entry` (`NAME=value`).
fn marked(entry: &[u8]) -> io::Result<Vec<u32>> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for dir in std::fs::read_dir("/proc")? {
        let Some(pid) = dir?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Gone meanwhile, or not ours to read: either way not one of this run's.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if pid != me && environ.split(|b| *b == 0).any(|e| e == entry) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

#[cfg(test)]
mod tests;
