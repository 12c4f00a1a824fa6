//! The keeper: a small process between treadle and each command it runs for a step (a
//! task's, a `run_shell`'s), so that nothing the command starts outlives the command, its
//! step, or treadle itself, even when treadle is killed with SIGKILL.
//!
//! A process group is not enough: a command's children may leave it (`setsid`, a double
//! fork), and when treadle is killed outright it cannot kill anything. So [`keep`] makes
//! the child treadle forks a *keeper* instead of the command. Between fork and exec the
//! keeper:
//!
//! * becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): every process of the command's
//!   tree that loses its parent is reparented to the keeper, not to init, however it left
//!   the group;
//! * asks for a signal when treadle dies (`PR_SET_PDEATHSIG`);
//! * forks the command (which gets a process group of its own and a parent-death SIGKILL
//!   of its own), closes every descriptor it holds, and waits.
//!
//! When the command exits, when treadle asks it to stop (SIGTERM, see [`stop`]), or when
//! treadle is gone (its parent changed), the keeper kills the command's group, then kills
//! its own children round after round (each round's orphans are its children in the next)
//! until it has none, and exits as the command did. The keeper runs no code but system
//! calls on its stack (it is a copy of a multi-threaded process), and holds no descriptor,
//! so the state file's lock and the command's pipes are not kept open by it.
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

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// Makes the process `cmd` starts a keeper of the command (see the module's documentation).
/// Call it before any other `pre_exec` work of `cmd` (Landlock's): that work then runs in
/// the command only. `cmd` should have `process_group(0)`, so that the keeper is out of
/// reach of the terminal's Ctrl-C, and no `kill_on_drop` (drop a [`Kept`] instead).
///
/// With `own_pids` (a confined command's), the command is the first process of a PID
/// namespace of its own (`confine::pid`; `confine::confine` then gives it its `/proc`):
/// it sees its own processes only, and the kernel kills what is left in the namespace
/// when it exits.
pub(crate) fn keep(cmd: &mut tokio::process::Command, own_pids: bool) {
    let treadle = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes system calls only, allocates nothing,
    // and in the keeper never returns (it ends with `_exit`).
    unsafe {
        cmd.pre_exec(move || fork_keeper(treadle, own_pids));
    }
}

/// Signals a keeper: SIGTERM, which stops its command's whole tree, and then it.
pub(crate) fn stop(child: &tokio::process::Child) {
    if let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // It may be gone already; nothing to do then.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Stops a keeper and waits (at most `grace`) for it, and with it the command's tree, to
/// be gone; past `grace` its process group is killed outright.
pub(crate) async fn stop_and_wait(child: &mut tokio::process::Child, grace: Duration) {
    stop(child);
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

/// A started keeper that is stopped when dropped (a step's future dropped mid-command,
/// say), where `kill_on_drop` would SIGKILL the keeper and leave its command's orphans.
pub(crate) struct Kept(pub tokio::process::Child);

impl Drop for Kept {
    fn drop(&mut self) {
        stop(&self.0);
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

/// The signals the keeper waits for (blocked, taken with `sigtimedwait`): a child's end,
/// a stop request, treadle's death.
fn watched() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset only write the set on this stack.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            PARENT_DIED,
        ] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// The keeper's parent-death signal. It is sent when the *thread* that forked the keeper
/// ends, too, so on it the keeper checks that treadle is really gone.
const PARENT_DIED: libc::c_int = libc::SIGUSR1;

/// Between fork and exec: becomes the keeper, forks the command and returns `Ok` in it;
/// the keeper itself never returns.
fn fork_keeper(treadle: libc::pid_t, own_pids: bool) -> io::Result<()> {
    let set = watched();
    // SAFETY: plain system calls with arguments on this stack, in a single-threaded child.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            PARENT_DIED as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != treadle {
            // Treadle died before the keeper could watch for it: start nothing.
            return Err(io::Error::other("treadle ended before the command started"));
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
        let keeper = libc::getpid();
        // Refused (a container without the rights): the command sees the machine's
        // processes, as docs/security.md says.
        let pids = if own_pids {
            crate::confine::pid::unshare_for_children()
        } else {
            crate::confine::pid::Pids::Shared
        };
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                // The command: its own group, the usual signal mask, and death with the
                // keeper (a keeper killed outright leaves no command running).
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                // The first process of a namespace sees its parent, outside it, as 0; the
                // death signal set above still covers a keeper that dies from here on.
                let isolated = pids != crate::confine::pid::Pids::Shared;
                let parent = if isolated { 0 } else { keeper };
                if libc::getppid() != parent {
                    libc::_exit(137);
                }
                libc::setpgid(0, 0);
                crate::confine::pid::map_user(pids)
            }
            command => {
                close_all();
                let status = watch(command, treadle, &set);
                exit_as(status)
            }
        }
    }
}

/// Closes every descriptor of the keeper (it needs none, and must not hold the command's
/// pipes, the state file's lock, or the pipe that tells treadle the exec succeeded).
///
/// # Safety
///
/// Only in the keeper, which uses no descriptor afterwards.
unsafe fn close_all() {
    // SAFETY: close_range(2) and close(2) on descriptors of this process only.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..65_536 {
                libc::close(fd);
            }
        }
    }
}

/// The keeper's life: waits for the command's end, a stop request or treadle's death,
/// then stops the command's whole tree. Returns the status to exit with.
///
/// # Safety
///
/// Only in the keeper, with `set` blocked.
unsafe fn watch(command: libc::pid_t, treadle: libc::pid_t, set: &libc::sigset_t) -> libc::c_int {
    let mut status: Option<libc::c_int> = None;
    let tick = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: sigtimedwait, waitpid and getppid with arguments on this stack.
        let (sig, orphaned) = unsafe {
            let sig = libc::sigtimedwait(set, std::ptr::null_mut(), &tick);
            reap(command, &mut status);
            (sig, libc::getppid() != treadle)
        };
        let asked = matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP);
        if asked || orphaned || status.is_some() {
            // SAFETY: in the keeper, per this function's contract.
            unsafe { sweep(command) };
            // Stopped before it ended: as if killed.
            return status.unwrap_or(libc::SIGKILL);
        }
        // A timeout, a stray PARENT_DIED from the thread that forked the keeper, or the
        // end of a child that was not the command: keep watching.
    }
}

/// Reaps every child that has ended, keeping the command's status.
///
/// # Safety
///
/// Only in the keeper.
unsafe fn reap(command: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid writes the status on this stack.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == command {
            *status = Some(st);
        }
    }
}

/// Kills the command's group, then every child the keeper has (orphans of the tree come
/// to it), round after round, until it has none left.
///
/// # Safety
///
/// Only in the keeper.
unsafe fn sweep(command: libc::pid_t) {
    // SAFETY: kill(2) and waitpid(2); the group is the command's own (`setpgid(0, 0)`).
    unsafe {
        libc::kill(-command, libc::SIGKILL);
        // A fork bomb could refill the tree forever; give up after this many rounds.
        for _ in 0..10_000 {
            let killed = each_child(|pid| {
                libc::kill(pid, libc::SIGKILL);
            });
            match killed {
                // No way to list children: the group kill above is all there is.
                None => return,
                Some(0) => {
                    let mut st = 0;
                    while libc::waitpid(-1, &mut st, libc::WNOHANG) > 0 {}
                    return;
                }
                Some(_) => {
                    // Wait for one to end (its orphans are then the keeper's children).
                    let mut st = 0;
                    libc::waitpid(-1, &mut st, 0);
                    while libc::waitpid(-1, &mut st, libc::WNOHANG) > 0 {}
                }
            }
        }
    }
}

/// Calls `f` with each child of the calling (single-threaded) process, read from
/// `/proc/thread-self/children` without allocating. `None` when the file cannot be read.
///
/// # Safety
///
/// Only in the keeper.
unsafe fn each_child(mut f: impl FnMut(libc::pid_t)) -> Option<usize> {
    const PATH: &[u8] = b"/proc/thread-self/children\0";
    // SAFETY: open/read/close with a NUL-terminated path and a buffer on this stack.
    unsafe {
        let fd = libc::open(PATH.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut buf = [0u8; 512];
        let (mut count, mut pid, mut digits) = (0usize, 0 as libc::pid_t, false);
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n.unsigned_abs()] {
                if b.is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(b - b'0'));
                    digits = true;
                } else if digits {
                    f(pid);
                    count += 1;
                    (pid, digits) = (0, false);
                }
            }
        }
        if digits {
            f(pid);
            count += 1;
        }
        libc::close(fd);
        Some(count)
    }
}

/// Ends the keeper the way the command ended: the same exit code, or the same signal
/// (without a core dump: the keeper is a copy of treadle's memory).
fn exit_as(status: libc::c_int) -> ! {
    // SAFETY: setrlimit, signal, sigprocmask, kill and _exit with arguments on this stack.
    unsafe {
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            libc::SIGKILL
        };
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

#[cfg(test)]
mod tests;
