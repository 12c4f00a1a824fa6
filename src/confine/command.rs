//! The command's own half of its confinement: what it does to itself after its keeper
//! forked it and before it execs (a `/proc` of its own, a network namespace, no
//! `CAP_SYS_PTRACE`, the Landlock rulesets built in treadle). One function, [`apply`],
//! whichever way the keeper was started (a fork of treadle, or a clone of treadle's
//! spawner, `crate::keeper`), so the rule lives in one place.
//!
//! A [`Confinement`] holds the rulesets' descriptors; [`Confinement::raw`] is the same as
//! plain values for the moment between fork and exec, where nothing may allocate; it is
//! also what the spawner receives from treadle ([`Raw::encode`], the descriptors passed
//! beside it).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::network::Namespace;

/// The most rulesets a command restricts itself with: its own and the shared network
/// layer.
pub(crate) const MAX_RULESETS: usize = 2;

/// What a command must do to itself before it runs (see the module's documentation).
#[derive(Debug, Default)]
pub struct Confinement {
    /// Landlock rulesets to restrict with, in order (none without Landlock).
    pub(crate) rulesets: Vec<OwnedFd>,
    /// Whether the keeper makes the command the first process of a PID namespace, which
    /// then mounts a `/proc` of its own.
    pub(crate) own_pids: bool,
    /// Whether that `/proc` is added to the first ruleset (its file rules).
    pub(crate) proc_rule: bool,
    /// The access rights of that rule (`pid::proc_access`).
    pub(crate) proc_access: u64,
    /// A network namespace to enter.
    pub(crate) namespace: Option<Namespace>,
}

impl Confinement {
    /// The same as plain values, the descriptors by number (still owned by `self`).
    pub(crate) fn raw(&self) -> Raw {
        let mut rulesets = [-1; MAX_RULESETS];
        for (slot, fd) in rulesets.iter_mut().zip(&self.rulesets) {
            *slot = fd.as_raw_fd();
        }
        Raw {
            rulesets,
            own_pids: self.own_pids,
            proc_rule: self.proc_rule,
            proc_access: self.proc_access,
            namespace: self.namespace,
        }
    }
}

/// A [`Confinement`] as plain values: copied into the closure that runs between fork and
/// exec, or sent to the spawner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw {
    /// Ruleset descriptors, `-1` for none.
    pub(crate) rulesets: [RawFd; MAX_RULESETS],
    pub(crate) own_pids: bool,
    pub(crate) proc_rule: bool,
    pub(crate) proc_access: u64,
    pub(crate) namespace: Option<Namespace>,
}

/// The length of [`Raw::encode`]'s bytes.
pub(crate) const ENCODED: usize = 12;

impl Raw {
    /// How many rulesets it names.
    pub(crate) fn ruleset_count(&self) -> usize {
        self.rulesets.iter().filter(|fd| **fd >= 0).count()
    }

    /// Its values but the descriptors, which travel beside them (`SCM_RIGHTS`).
    pub(crate) fn encode(&self) -> [u8; ENCODED] {
        let mut out = [0u8; ENCODED];
        out[0] = u8::from(self.own_pids) | (u8::from(self.proc_rule) << 1);
        out[1] = match self.namespace {
            None => 0,
            Some(Namespace::Empty) => 1,
            Some(Namespace::Loopback) => 2,
        };
        // The count: always at most MAX_RULESETS.
        out[2] = u8::try_from(self.ruleset_count()).unwrap_or(u8::MAX);
        out[4..12].copy_from_slice(&self.proc_access.to_le_bytes());
        out
    }

    /// Reads [`Raw::encode`]'s bytes back, with the descriptors received beside them;
    /// `None` when they do not fit together.
    pub(crate) fn decode(bytes: &[u8; ENCODED], fds: &[RawFd]) -> Option<Raw> {
        let namespace = match bytes[1] {
            0 => None,
            1 => Some(Namespace::Empty),
            2 => Some(Namespace::Loopback),
            _ => return None,
        };
        if usize::from(bytes[2]) != fds.len() || fds.len() > MAX_RULESETS || bytes[0] > 3 {
            return None;
        }
        let mut rulesets = [-1; MAX_RULESETS];
        rulesets[..fds.len()].copy_from_slice(fds);
        let mut access = [0u8; 8];
        access.copy_from_slice(&bytes[4..12]);
        Some(Raw {
            rulesets,
            own_pids: bytes[0] & 1 != 0,
            proc_rule: bytes[0] & 2 != 0,
            proc_access: u64::from_le_bytes(access),
            namespace,
        })
    }
}

/// In the command, between its keeper's fork and its exec: mounts its own `/proc` (in its
/// own PID namespace), enters its network namespace, drops `CAP_SYS_PTRACE`, and restricts
/// itself with each ruleset. Makes system calls only; allocates only to report an error.
///
/// # Safety
///
/// Between fork and exec only, in the command the keeper forked; `raw`'s descriptors are
/// Landlock rulesets of this process.
pub(crate) unsafe fn apply(raw: &Raw) -> io::Result<()> {
    if raw.own_pids {
        let rule = raw
            .proc_rule
            .then_some(raw.rulesets[0])
            .filter(|fd| *fd >= 0);
        // SAFETY: per this function's contract.
        unsafe { super::pid::own_proc(rule, raw.proc_access)? };
    }
    if let Some(ns) = raw.namespace {
        super::network::enter(ns)?;
    }
    super::drop_ptrace();
    for &fd in raw.rulesets.iter().filter(|fd| **fd >= 0) {
        // SAFETY: prctl and landlock_restrict_self(2) with plain integers; what the
        // landlock crate's `restrict_self` does (its flags are 0 here).
        let restricted = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) == 0
        };
        if !restricted {
            let err = io::Error::last_os_error();
            return Err(io::Error::other(format!("Landlock: {err}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confinement_travels_whole() {
        for (fds, namespace) in [
            (&[][..], None),
            (&[7][..], Some(Namespace::Empty)),
            (&[7, 9][..], Some(Namespace::Loopback)),
        ] {
            let mut rulesets = [-1; MAX_RULESETS];
            rulesets[..fds.len()].copy_from_slice(fds);
            let raw = Raw {
                rulesets,
                own_pids: true,
                proc_rule: !fds.is_empty(),
                proc_access: 0x1234_5678_9abc,
                namespace,
            };
            assert_eq!(Raw::decode(&raw.encode(), fds), Some(raw));
        }
        // Descriptors that do not match the count are refused.
        let raw = Raw {
            rulesets: [4, -1],
            own_pids: false,
            proc_rule: false,
            proc_access: 0,
            namespace: None,
        };
        assert_eq!(Raw::decode(&raw.encode(), &[]), None);
    }
}
