//! What a confined command sees of other processes (docs/security.md, "Other processes"):
//! a PID namespace of its own, and a `/proc` that shows that namespace only (bubblewrap's
//! model). Landlock's ptrace scoping does not keep one task from another here: this kernel
//! lets a process open the `environ` and `cmdline` of a process in a sibling Landlock
//! domain (it refuses only `mem` and `ptrace` itself), so two tasks of the same user at
//! once could read each other's environment. In a namespace of its own, the other tasks,
//! their keepers and treadle have no `/proc/PID` at all.
//!
//! Three parts, all between fork and exec, system calls only:
//!
//! * [`unshare_for_children`], in the keeper before it forks the command: the command is
//!   then the first process (PID 1) of a new PID namespace. When that namespace ends (the
//!   command exits) the kernel kills whatever is left in it. Not root, the keeper makes a
//!   user namespace with it.
//! * [`map_user`], in the command: that user namespace's maps (its own user and group).
//! * [`own_proc`], in the command: a mount namespace of its own, with a fresh `proc`
//!   mounted on `/proc`, which its Landlock ruleset (not yet enforced) is allowed to read:
//!   the rules built in treadle named the machine's `/proc`, another file system.
//!
//! Where the system refuses a namespace (a container without the rights), the command runs
//! as before, seeing the machine's processes; docs/security.md says so.

use std::io;
use std::os::fd::RawFd;

/// What the keeper made for its command ([`unshare_for_children`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pids {
    /// Nothing: the command sees the machine's processes.
    Shared,
    /// A PID namespace (treadle runs as root).
    Own,
    /// A PID namespace and a user namespace with it, whose maps the command writes
    /// ([`map_user`]): `uid` and `gid` as they were before it was made.
    OwnWithUser { uid: u32, gid: u32 },
}

/// Between fork and exec, in the keeper: makes its next child the first process of a new
/// PID namespace. Without the right to (not root) it makes a user namespace too, which
/// gives the command the right to mount its `/proc`; the command maps its user and group
/// there ([`map_user`]). Returns what was made.
pub(crate) fn unshare_for_children() -> Pids {
    // SAFETY: unshare, getuid and getgid take plain arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWPID) == 0 {
            return Pids::Own;
        }
        let (uid, gid) = (libc::getuid(), libc::getgid());
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
            return Pids::Shared;
        }
        Pids::OwnWithUser { uid, gid }
    }
}

/// Between fork and exec, in the command, first: when the keeper made a user namespace
/// with the PID namespace, maps the command's user and group onto themselves there (files
/// keep their owners). The keeper cannot: a process that is not dumpable (treadle and its
/// forks, `crate::environ::take_keys`) has `/proc/self` files owned by root, so the maps
/// are written by the command, which execs next (`network::map_self`).
///
/// # Safety
///
/// Between fork and exec only, in the command the keeper forked.
pub(crate) unsafe fn map_user(pids: Pids) -> io::Result<()> {
    match pids {
        // SAFETY: per this function's contract.
        Pids::OwnWithUser { uid, gid } => unsafe { super::network::map_self(uid, gid) },
        Pids::Shared | Pids::Own => Ok(()),
    }
}

/// The access rights of `/proc` as a confined command gets them (the system's: read and
/// execute), as the kernel's Landlock ABI knows them.
pub(crate) fn proc_access() -> u64 {
    let abi = super::abi().unwrap_or(0).min(super::TARGET as i32);
    landlock::AccessFs::from_read(landlock::ABI::from(abi)).bits()
}

/// Between fork and exec, in the command: when it is the first process of a PID namespace
/// of its own ([`unshare_for_children`] worked), mounts a `/proc` of that namespace in a
/// mount namespace of its own, and adds it to `ruleset` (the command's Landlock ruleset,
/// before it is enforced) with `access`. A command not in a namespace of its own is left
/// as it is.
///
/// # Safety
///
/// Between fork and exec only; `ruleset` is a Landlock ruleset descriptor of this process.
pub(crate) unsafe fn own_proc(ruleset: Option<RawFd>, access: u64) -> io::Result<()> {
    // SAFETY: getpid, unshare, mount, open and the Landlock call take NUL-terminated
    // constants and a packed attribute on this stack.
    unsafe {
        if libc::getpid() != 1 {
            return Ok(());
        }
        let fail = |what: &str| {
            let err = io::Error::last_os_error();
            io::Error::other(format!(
                "cannot give the command a /proc of its own ({what}: {err})"
            ))
        };
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(fail("mount namespace"));
        }
        // Slave: nothing mounted here goes back to the machine's mounts.
        let none = std::ptr::null::<libc::c_char>();
        if libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("private mounts"));
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("mount proc"));
        }
        let Some(ruleset) = ruleset else {
            return Ok(());
        };
        let proc = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if proc < 0 {
            return Err(fail("open /proc"));
        }
        #[repr(C, packed)]
        struct PathBeneath {
            allowed_access: u64,
            parent_fd: i32,
        }
        let rule = PathBeneath {
            allowed_access: access,
            parent_fd: proc,
        };
        const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
        let added = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        );
        if added != 0 {
            let err = fail("Landlock rule for /proc");
            libc::close(proc);
            return Err(err);
        }
        libc::close(proc);
        Ok(())
    }
}
