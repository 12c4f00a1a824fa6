//! The path rules many confined commands share (the system, the toolchains, `/dev`): their
//! paths opened once per process and set of rules, and added to each command's own ruleset
//! by descriptor. A caller's own places (a hook's project) are opened per command ([`open`]).
//!
//! Built path by path, as the `landlock` crate's `path_beneath_rules` does, a rule costs an
//! `open`, two `fstat`s, a `fcntl` and a `close` besides the `landlock_add_rule`; a task had
//! about 23 of them, the same every time (issue 42: 130 of the 360 system calls a `true`
//! task made). Here each path is opened and looked at once, rules naming the same file
//! (`/bin` and `/usr/bin` on a merged-`/usr` system, or a path listed twice) are merged, and a
//! command's ruleset then costs one `landlock_add_rule` per rule. A ruleset cannot be shared
//! between commands: each holds its own step directory, and rulesets only grow.
//!
//! A path that cannot be opened is left out, as the crate leaves it out. The descriptors
//! are `O_PATH` and close-on-exec: they give no access of their own, and no command
//! inherits them.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use landlock::{ABI, Access, AccessFs, BitFlags, RulesetCreated};

use super::TARGET;

/// The rules wanted: each path with what may be done beneath it.
pub(super) type Wanted = Vec<(PathBuf, BitFlags<AccessFs>)>;

/// The opened rules of one [`Wanted`] list.
#[derive(Debug)]
pub(super) struct Base {
    /// Each distinct file with the rights granted beneath it (Landlock's bits, already
    /// narrowed to what the kernel knows and, for a file that is not a directory, to the
    /// rights a file can have: the kernel refuses more).
    rules: Vec<(OwnedFd, u64)>,
}

/// The rules of `wanted`, opened the first time this process asks for them.
pub(super) fn base(wanted: Wanted) -> Arc<Base> {
    static OPENED: Mutex<Vec<(Wanted, Arc<Base>)>> = Mutex::new(Vec::new());
    let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, found)) = opened.iter().find(|(w, _)| *w == wanted) {
        return found.clone();
    }
    let built = Arc::new(open(&wanted));
    // A handful of distinct policies per process (a task's, a hook's per project, a CLI
    // agent's per install); the bound keeps a pathological one (a `PATH` per step) from
    // holding descriptors for ever.
    if opened.len() >= 16 {
        opened.remove(0);
    }
    opened.push((wanted, built.clone()));
    built
}

/// Opens each path of `wanted` and merges the rules naming the same file.
pub(super) fn open(wanted: &[(PathBuf, BitFlags<AccessFs>)]) -> Base {
    let mut rules: Vec<(OwnedFd, u64, (u64, u64))> = Vec::new();
    for (path, access) in wanted {
        let Some((fd, access, id)) = opened(path, *access) else {
            continue;
        };
        match rules.iter_mut().find(|r| r.2 == id) {
            Some(same) => same.1 |= access,
            None => rules.push((fd, access, id)),
        }
    }
    Base {
        rules: rules.into_iter().map(|(fd, a, _)| (fd, a)).collect(),
    }
}

/// `path` opened as `O_PATH`, the rights a rule on it may carry, and its device and
/// inode; `None` when it cannot be opened.
fn opened(path: &Path, access: BitFlags<AccessFs>) -> Option<(OwnedFd, u64, (u64, u64))> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let mut access = access.bits() & known();
    if !meta.is_dir() {
        access &= AccessFs::from_file(TARGET).bits();
    }
    Some((file.into(), access, (meta.dev(), meta.ino())))
}

/// The file-system rights the running kernel's Landlock knows: a ruleset made with
/// best-effort compatibility handles only those, and a rule granting others is refused.
fn known() -> u64 {
    AccessFs::from_all(ABI::from(super::abi().unwrap_or(0))).bits()
}

/// `struct landlock_path_beneath_attr` of the kernel's UAPI (packed).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_long = 1;

/// Adds the rules of each of `bases` to `ruleset` (created, not yet enforced), and `dir`
/// with every right the ruleset handles (a command's step directory).
pub(super) fn add_to<'a>(
    ruleset: &RulesetCreated,
    bases: impl IntoIterator<Item = &'a Base>,
    dir: &Path,
) -> io::Result<()> {
    // The crate does not lend its descriptor; a duplicate names the same ruleset.
    let Some(target) = Option::<OwnedFd>::from(ruleset.try_clone()?) else {
        // No Landlock after all (the ruleset enforces nothing): nothing to add to.
        return Ok(());
    };
    for base in bases {
        for (parent, access) in &base.rules {
            add(&target, parent, *access)?;
        }
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    add(
        &target,
        &dir.into(),
        AccessFs::from_all(TARGET).bits() & known(),
    )
}

impl Base {
    /// How many distinct files its rules name.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.rules.len()
    }
}

/// One `landlock_add_rule`: `access` beneath `parent` in `ruleset`.
fn add(ruleset: &OwnedFd, parent: &OwnedFd, access: u64) -> io::Result<()> {
    if access == 0 {
        return Ok(());
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: landlock_add_rule reads the attribute on this stack (laid out as the kernel's
    // packed struct) and takes two descriptors this process holds.
    let done = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &raw const attr,
            0u32,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_listed_twice_or_under_two_names_is_one_rule() {
        let root = tempfile::tempdir().unwrap();
        let (dir, link) = (root.path().join("d"), root.path().join("l"));
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let read = AccessFs::from_read(TARGET);
        let wanted = vec![
            (dir.clone(), read),
            (link, read),
            (dir, read),
            (root.path().join("missing"), read),
        ];
        let opened = base(wanted.clone());
        assert_eq!(opened.count(), 1);
        // Asked again, the same rules: opened once.
        assert!(Arc::ptr_eq(&opened, &base(wanted)));
    }
}
