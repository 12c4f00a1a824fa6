//! The journals open in this process, by file: each file is opened once and its handle
//! shared, so two parts of a program that name the same file get the same writer (and the
//! same record of which sessions are live in it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use super::Inner;

static OPEN: LazyLock<Mutex<HashMap<PathBuf, Weak<Inner>>>> = LazyLock::new(Mutex::default);

/// The registry, locked while one open looks up and (if needed) opens a file, so two
/// threads opening one file do not both reach redb.
pub(super) struct Registry(MutexGuard<'static, HashMap<PathBuf, Weak<Inner>>>);

impl Registry {
    pub(super) fn lock() -> Self {
        Registry(map())
    }

    /// The open handle of `key`'s file, if this process has one.
    pub(super) fn find(&self, key: &Path) -> Option<Arc<Inner>> {
        self.0.get(key).and_then(Weak::upgrade)
    }

    /// Whether this process's last handle of `key` is being dropped right now: its writer
    /// may still be finishing and the file still locked. Its [`Registered`] marker removes
    /// the entry once the file is closed.
    pub(super) fn closing(&self, key: &Path) -> bool {
        self.0.get(key).is_some_and(|weak| weak.strong_count() == 0)
    }

    pub(super) fn insert(&mut self, key: PathBuf, inner: &Arc<Inner>) {
        self.0.insert(key, Arc::downgrade(inner));
    }
}

fn map() -> MutexGuard<'static, HashMap<PathBuf, Weak<Inner>>> {
    // Entries are only inserted and removed whole, so a poisoned map is still a valid map.
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held by an open journal after its database: dropped once the file is closed, it takes
/// the file out of the registry.
pub(super) struct Registered(pub PathBuf);

impl Drop for Registered {
    fn drop(&mut self) {
        let mut map = map();
        if map
            .get(&self.0)
            .is_some_and(|weak| weak.strong_count() == 0)
        {
            map.remove(&self.0);
        }
    }
}

/// The registry key of `path`: absolute, with the directory's symlinks resolved, so two
/// spellings of one file meet. The directory exists by now (open creates it).
pub(super) fn key(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map(|dir| dir.join(name))
            .unwrap_or(absolute),
        _ => absolute,
    }
}

/// Removes a temporary journal's files when its last handle is gone.
pub(super) struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in [self.0.clone(), super::wal::path_for(&self.0)] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(%error, path = %path.display(), "cannot remove a temporary journal file");
                }
            }
        }
    }
}
