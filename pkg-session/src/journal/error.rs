//! Typed errors of the journal, one enum per operation.

use std::path::PathBuf;
use std::sync::Arc;

/// Why [`super::Journal::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalOpenError {
    /// redb holds a lock on the file for as long as one handle has it open.
    #[error(
        "journal {} is already open in another process (or by another Journal in this process); \
         open it once and share the handle",
        path.display()
    )]
    AlreadyOpen { path: PathBuf },
    #[error("cannot create the directory {} for the journal", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open journal {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: redb::DatabaseError,
    },
    /// The file opened, but its tables could not be created or read.
    #[error("cannot prepare the tables of journal {}", path.display())]
    Init {
        path: PathBuf,
        #[source]
        source: redb::Error,
    },
    #[error("cannot start the writer thread of journal {}", path.display())]
    SpawnWriter {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why [`super::Journal::append`] failed. Nothing of the group was written, unless the
/// error is [`AppendError::Storage`] from a commit, which redb says "may already have become
/// durable"; appending the same events again is safe because appends are idempotent.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The writer thread is gone (it can only stop with the last handle, or by a bug).
    #[error("the journal writer has stopped")]
    Closed,
    /// An event could not be encoded; nothing of the group was sent to the writer.
    #[error("cannot encode event {index} of the group")]
    Encode {
        index: usize,
        #[source]
        source: Arc<serde_json::Error>,
    },
    /// The batch holding this group failed to write or commit; every group of that batch
    /// gets the same error, and the writer carries on with the next batch.
    #[error("the journal write failed")]
    Storage(#[source] Arc<redb::Error>),
}

/// Why a read of the journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("the journal read failed")]
    Storage(#[source] redb::Error),
    /// A stored value or index entry does not make sense.
    #[error("journal entry seq {seq} is corrupt: {detail}")]
    Corrupt { seq: u64, detail: String },
}

impl ReadError {
    pub(crate) fn storage(error: impl Into<redb::Error>) -> Self {
        ReadError::Storage(error.into())
    }
}
