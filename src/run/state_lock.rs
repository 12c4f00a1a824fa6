//! The state file's lock: one treadle process uses a state file at a time, and one that
//! finds it taken is told which process holds it.
//!
//! redb locks the database file itself, but only once it exists: two first runs in a fresh
//! directory race to create it and can both fail. An advisory lock on `<state>.lock`, taken
//! before the state file is touched, makes exactly one of them the creator. The lock file
//! holds the holder's pid and command line, for the message the other one prints. The
//! kernel drops the lock when the holder exits, however it exits.
//!
//! The lock file is also where a run's end goes when the state file cannot take it (a full
//! disk): the holder writes [`RESERVED`] bytes when it takes the lock, so that a note of a
//! few hundred bytes can later be written over them without the filesystem allocating
//! anything ([`Held::note`]). The next process to take the lock (so the writer is gone)
//! finds the note ([`Held::noted`]) and records it in the state file, then clears it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The bytes the holder writes into the lock file up front: room for its own line and a
/// note, overwritten in place.
pub const RESERVED: usize = 4096;

/// The start of the line that holds a note.
const NOTE: &str = "note: ";

/// The most of the holder's line that is kept (a long command line leaves room for a note).
const HOLDER_MAX: usize = 1024;

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error("the state file {path} is in use by another treadle process ({holder})")]
    Held {
        /// The state file.
        path: PathBuf,
        /// Who: `pid N: COMMAND`, as the holder wrote it.
        holder: String,
    },
    /// The lock file cannot be made or locked.
    #[error("cannot lock the state file {path}: {source}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct Held {
    file: File,
    /// This holder's line: `pid N: COMMAND`.
    me: String,
    /// The note a previous holder left, until [`Held::clear_note`].
    noted: Option<String>,
    /// The lock file's device and inode, in [`HELD`] while this is alive.
    id: Option<(u64, u64)>,
}

/// The lock files this process holds now (device, inode): a lock that names this process
/// but is not listed was let go, and only a command being started still has it.
static HELD: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

fn file_id(file: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a [`Held`] of this process holds the lock file `file` is open on.
fn held_here(file: &File) -> bool {
    let id = file_id(file);
    let held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    id.is_some_and(|id| held.contains(&id))
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut held = HELD
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(i) = held.iter().position(|h| *h == id) {
                held.swap_remove(i);
            }
        }
    }
}

/// A note longer than what the lock file reserves for it.
#[derive(Debug, thiserror::Error)]
#[error("a note of {0} bytes does not fit in the lock file's {RESERVED}")]
pub struct TooLong(pub usize);

impl Held {
    /// The note the previous holder left (it could not write to the state file).
    pub fn noted(&self) -> Option<&str> {
        self.noted.as_deref()
    }

    /// Writes `note` (one line) over the reserved bytes, allocating nothing on a
    /// filesystem that overwrites in place; the next holder reads it back. Replaces a note
    /// written before.
    pub fn note(&self, note: &str) -> std::io::Result<()> {
        let text = format!("{}\n{NOTE}{}\n", self.me, note.replace('\n', " "));
        if text.len() > RESERVED {
            return Err(std::io::Error::other(TooLong(text.len())));
        }
        self.write(&text)?;
        // Only what has reached the disk survives a power cut: the note is the run's end.
        self.file.sync_data()
    }

    /// Forgets the previous holder's note once it is recorded elsewhere.
    pub fn clear_note(&mut self) -> std::io::Result<()> {
        self.noted = None;
        self.write(&format!("{}\n", self.me))
    }

    /// `text`, padded with spaces to [`RESERVED`] bytes, over the file's start.
    fn write(&self, text: &str) -> std::io::Result<()> {
        let mut bytes = text.as_bytes().to_vec();
        bytes.resize(RESERVED.max(bytes.len()), b' ');
        self.file.write_all_at(&bytes, 0)
    }
}

/// The lock file of a state file.
fn lock_path(state: &Path) -> PathBuf {
    let mut p = state.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Takes the lock of the state file at `state`, creating its directory if needed.
pub fn acquire(state: &Path) -> Result<Held, LockError> {
    let io = |source| LockError::Io {
        path: state.to_path_buf(),
        source,
    };
    if let Some(dir) = state.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path(state))
        .map_err(io)?;
    let mut waited = std::time::Duration::ZERO;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let holder = holder(&mut file);
                // A holder that is dead still holds the lock while a process it forked
                // has not yet reached exec (where the descriptor closes) or its keeper's
                // first system calls (which close every descriptor): moments, longer on a
                // loaded machine. Wait those out rather than blame a dead process. The same
                // holds for this very process once it let go (a workflow's state file opened
                // again): a command another thread is starting holds the descriptor as long.
                let ours = holder_pid(&holder) == Some(std::process::id());
                let gone = holder_is_dead(&holder) || (ours && !held_here(&file));
                if waited < DEAD_HOLDER_GRACE && gone {
                    std::thread::sleep(DEAD_HOLDER_POLL);
                    waited += DEAD_HOLDER_POLL;
                    continue;
                }
                return Err(LockError::Held {
                    path: state.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    let noted = previous_note(&mut file);
    let args: Vec<String> = std::env::args().collect();
    let mut me = format!("pid {}: {}", std::process::id(), args.join(" "));
    truncate(&mut me, HOLDER_MAX);
    let id = file_id(&file);
    if let Some(id) = id {
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(id);
    }
    let held = Held {
        file,
        me,
        noted,
        id,
    };
    // Who holds it is only informational: a failure to say so (or to reserve the room for
    // a note, on a full disk) does not stop the run. A previous note is kept until it is
    // recorded.
    let _ = match held.noted.as_deref() {
        Some(note) => held.note(note),
        None => held.write(&format!("{}\n", held.me)),
    };
    Ok(held)
}

/// Cuts `text` to at most `max` bytes, at a character's boundary.
pub(super) fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i));
        text.truncate(cut.unwrap_or(0));
    }
}

/// The note a previous holder left in the lock file, if any.
fn previous_note(file: &mut File) -> Option<String> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(RESERVED as u64 * 2)
        .read_to_string(&mut text)
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(NOTE))
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
}

/// How long a lock whose writer is dead is waited for (see [`acquire`]).
const DEAD_HOLDER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// How often it is tried again meanwhile.
const DEAD_HOLDER_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether the process named in `holder` (`pid N: ...`, as [`acquire`] writes it) is
/// gone. A text that names no pid is not taken as dead.
fn holder_is_dead(holder: &str) -> bool {
    holder_pid(holder).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// The pid named in `holder` (`pid N: ...`).
fn holder_pid(holder: &str) -> Option<u32> {
    holder
        .strip_prefix("pid ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|pid| pid.trim().parse::<u32>().ok())
}

/// What the holder wrote in the lock file; a holder that has just taken the lock is given
/// a moment to write it.
fn holder(file: &mut File) -> String {
    for _ in 0..40 {
        let mut text = String::new();
        let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
        let line = text.lines().next().unwrap_or_default().trim();
        if !line.is_empty() {
            return line.chars().take(200).collect();
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    "pid unknown: it is starting".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_holder_is_dead_only_when_its_pid_is_gone() {
        assert!(holder_is_dead("pid 999999999: treadle run"));
        assert!(!holder_is_dead(&format!(
            "pid {}: treadle run",
            std::process::id()
        )));
        assert!(!holder_is_dead("pid unknown: it is starting"));
    }

    /// A child that holds this process's descriptors for 400 ms before it execs `true`.
    fn slow_to_exec() -> std::process::Child {
        let mut child = std::process::Command::new("true");
        // SAFETY: nanosleep is async-signal-safe; the closure allocates nothing.
        unsafe {
            child.pre_exec(|| {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 400_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
                Ok(())
            });
        }
        child.spawn().expect("spawn")
    }

    /// The window a SIGKILLed treadle leaves: a process it forked still holds the lock's
    /// descriptor until it execs. The next treadle waits that out instead of refusing.
    #[test]
    fn a_lock_kept_by_a_dead_writers_fork_is_taken_once_the_fork_execs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.redb");
        let held = acquire(&state).expect("first lock");
        let mut child = slow_to_exec();
        drop(held);
        std::fs::write(lock_path(&state), "pid 999999999: treadle run").expect("rewrite");
        let taken = acquire(&state);
        child.wait().expect("wait");
        assert!(taken.is_ok(), "{taken:?}");
    }

    /// The window of a workflow that opens its state file again in the same process: a
    /// command another thread is starting still holds the descriptor until it execs.
    #[test]
    fn a_lock_this_process_let_go_is_taken_once_a_command_it_starts_execs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.redb");
        let held = acquire(&state).expect("first lock");
        let mut child = slow_to_exec();
        drop(held);
        let taken = acquire(&state);
        child.wait().expect("wait");
        assert!(taken.is_ok(), "{taken:?}");
    }

    #[test]
    fn a_lock_of_a_live_holder_is_refused_at_once_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.redb");
        let _held = acquire(&state).expect("first lock");
        // A second open file description in this process conflicts like another process.
        match acquire(&state) {
            Err(LockError::Held { holder, .. }) => {
                assert!(holder.contains(&std::process::id().to_string()), "{holder}")
            }
            other => panic!("expected Held, got {other:?}"),
        }
    }
}
