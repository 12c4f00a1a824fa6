//! The keeper's life, the same whether treadle forked it or its spawner cloned it
//! (`super::spawner`): [`begin`] (become a subreaper watching treadle, fork the command),
//! [`confine_command`] (what the command does to itself before its exec) and [`live`]
//! (watch, sweep the command's tree, exit as it did). Everything here makes system calls
//! only, on the stack: in a fork of treadle, a copy of a multi-threaded process, nothing
//! else is safe.

use std::io;

/// The signals the keeper waits for (blocked, taken with `sigtimedwait`): a child's end,
/// a stop request, treadle's death.
pub(super) fn watched() -> libc::sigset_t {
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
pub(super) const PARENT_DIED: libc::c_int = libc::SIGUSR1;

/// What [`begin`] returned in: the command, or the keeper that forked it.
pub(super) enum Begun {
    /// The command's process, which goes on to [`confine_command`] and exec.
    Command(crate::confine::pid::Pids),
    /// The keeper, which goes on to [`live`].
    Keeper {
        /// The command's pid.
        command: libc::pid_t,
        /// The signals it waits for, blocked.
        set: libc::sigset_t,
    },
}

/// Becomes the keeper (in a process whose parent is treadle, `treadle`): blocks the signals
/// it waits for, asks for one when treadle dies, becomes a subreaper, makes a PID
/// namespace for its next child with `own_pids`, and forks the command. Returns in both:
/// in the command (its own group, the usual signal mask, death with the keeper, its user
/// mapped in that namespace) and in the keeper. Fails, starting nothing, when treadle is
/// already gone or the fork fails.
///
/// # Safety
///
/// In a single-threaded process (a fork of treadle between fork and exec, or a clone of
/// the spawner): system calls only, arguments on this stack.
pub(super) unsafe fn begin(treadle: libc::pid_t, own_pids: bool) -> io::Result<Begun> {
    let set = watched();
    // SAFETY: plain system calls with arguments on this stack, in a single-threaded process.
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
                Ok(Begun::Command(pids))
            }
            command => Ok(Begun::Keeper { command, set }),
        }
    }
}

/// In the command, after [`begin`]: maps its user in the namespaces its keeper made,
/// applies its confinement (`crate::confine::command::apply`), and marks every descriptor
/// but 0, 1 and 2 close-on-exec ([`only_stdio`]).
///
/// # Safety
///
/// Only in the command, between [`begin`] and exec; `raw`'s descriptors are rulesets.
pub(super) unsafe fn confine_command(
    pids: crate::confine::pid::Pids,
    raw: &crate::confine::command::Raw,
) -> io::Result<()> {
    // SAFETY: per this function's contract.
    unsafe {
        crate::confine::pid::map_user(pids)?;
        crate::confine::command::apply(raw)?;
        only_stdio();
    }
    Ok(())
}

/// Marks every descriptor above 2 close-on-exec, so that the command gets its standard
/// input, output and error only: treadle's own descriptors are close-on-exec already, but
/// one treadle inherited without the flag (a test harness's, a shell's) would otherwise
/// reach every command. Marked, not closed: the pipe that tells `std` the exec succeeded
/// must stay open until the exec.
///
/// # Safety
///
/// Between fork and exec, in a process that uses none of them by number afterwards.
pub(super) unsafe fn only_stdio() {
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC, or fcntl(2), on this process's own
    // descriptors.
    unsafe {
        let marked = libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if marked != 0 {
            // Before Linux 5.11: descriptor by descriptor.
            for fd in 3..65_536 {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
        }
    }
}

/// The rest of the keeper's life: closes every descriptor, waits for the command's end, a
/// stop request or treadle's death, stops the command's whole tree, and exits as the
/// command did.
///
/// # Safety
///
/// Only in the keeper, after [`begin`] returned [`Begun::Keeper`].
pub(super) unsafe fn live(command: libc::pid_t, treadle: libc::pid_t, set: &libc::sigset_t) -> ! {
    // SAFETY: per this function's contract.
    unsafe {
        close_all();
        let status = watch(command, treadle, set);
        exit_as(status)
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
