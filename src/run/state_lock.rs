//! The state file's lock: one treadle process uses a state file at a time, and one that
//! finds it taken is told which process holds it.
//!
//! redb locks the database file itself, but only once it exists: two first runs in a fresh
//! directory race to create it and can both fail. An advisory lock on `<state>.lock`, taken
//! before the state file is touched, makes exactly one of them the creator. The lock file
//! holds the holder's pid and command line, for the message the other one prints. The
//! kernel drops the lock when the holder exits, however it exits.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

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
    _file: File,
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
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(LockError::Held {
                path: state.to_path_buf(),
                holder: holder(&mut file),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io(e)),
    }
    let args: Vec<String> = std::env::args().collect();
    let me = format!("pid {}: {}", std::process::id(), args.join(" "));
    // Who holds it is only informational: a failure to say so does not stop the run.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(me.as_bytes()));
    Ok(Held { _file: file })
}

/// What the holder wrote in the lock file; a holder that has just taken the lock is given
/// a moment to write it.
fn holder(file: &mut File) -> String {
    for _ in 0..40 {
        let mut text = String::new();
        let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
        if !text.trim().is_empty() {
            return text.trim().chars().take(200).collect();
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    "pid unknown: it is starting".to_owned()
}
