//! The journal's redb file: created atomically, opened with a clear error when another
//! process holds it, and its tables prepared.

use std::path::{Path, PathBuf};

use redb::{Database, DatabaseError};

use super::tables::{BY_SESSION, EVENTS, IDS};
use super::{JournalOpenError, StorageError};

/// Creates the directories `path` lives in.
pub(super) fn create_parent(path: &Path) -> Result<(), JournalOpenError> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|source| JournalOpenError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Opens the redb file at `path` for a journal, creating its directories and the file
/// (atomically) if needed.
pub(super) fn open_database(path: &Path) -> Result<Database, JournalOpenError> {
    create_parent(path)?;
    let exists = path
        .try_exists()
        .map_err(|source| JournalOpenError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    if !exists {
        create(path)?;
    }
    open_db(path)
}

/// redb's page cache for a journal file, in bytes: its read cache and, within half of it,
/// the write buffer. redb's default (1 GiB) let a process keep every page it had read, and
/// every page written by the non-durable commits between two checkpoints (up to 8 MiB of
/// log), in memory: 4.9 MB of a 100-session bench's heap. The journal's durability is the
/// write-ahead log's, so a page the buffer cannot hold is written to the file early
/// (one `pwrite`, no sync); reads past the cache come from the OS page cache. The hot
/// pages, the B-tree's upper levels and the newest leaves, fit in this many.
const CACHE_BYTES: usize = 2 << 20;

fn open_db(path: &Path) -> Result<Database, JournalOpenError> {
    Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|source| match source {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                JournalOpenError::AlreadyOpen {
                    path: path.to_path_buf(),
                }
            }
            source => JournalOpenError::Open {
                path: path.to_path_buf(),
                source: StorageError::new(source),
            },
        })
}

/// Creates a new journal file atomically: built beside it as `<file>.creating` and renamed
/// into place once complete.
///
/// redb writes a new file's magic number last, and refuses a file without it, so a process
/// killed while redb initialises a file in place would leave a file no later open accepts.
/// Nothing can have been acknowledged before creation finished, so a leftover
/// `.creating` file is simply started over.
fn create(path: &Path) -> Result<(), JournalOpenError> {
    let io_error = |source| JournalOpenError::Create {
        path: path.to_path_buf(),
        source,
    };
    let mut creating = path.as_os_str().to_owned();
    creating.push(".creating");
    let creating = PathBuf::from(creating);
    match std::fs::remove_file(&creating) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error(error)),
    }
    let db = open_db(&creating)?;
    prepare(&db).map_err(|source| JournalOpenError::Init {
        path: path.to_path_buf(),
        source: StorageError::new(source),
    })?;
    drop(db);
    std::fs::rename(&creating, path).map_err(io_error)?;
    // The rename must be durable before anything is acknowledged through the new name.
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(io_error)?;
    #[cfg(not(unix))]
    let _ = parent;
    Ok(())
}

/// Creates the tables, so that reads never meet a missing table.
pub(super) fn prepare(db: &Database) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    txn.open_table(EVENTS)?;
    txn.open_table(IDS)?;
    txn.open_table(BY_SESSION)?;
    txn.commit()?;
    Ok(())
}
