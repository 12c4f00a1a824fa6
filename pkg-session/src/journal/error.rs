//! Typed errors of the journal, one enum per operation.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::shape::ShapeError;

/// A failure of the storage engine under the journal (redb). Opaque, so that no redb type
/// is part of this crate's API (a redb upgrade is then no break of it): its message is
/// redb's, and its [`source`](std::error::Error::source) is redb's own cause, if any.
#[derive(Debug, Clone)]
pub struct StorageError(Arc<redb::Error>);

impl StorageError {
    pub(crate) fn new(error: impl Into<redb::Error>) -> Self {
        StorageError(Arc::new(error.into()))
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Why [`super::Journal::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalOpenError {
    /// redb holds a lock on the file for as long as one handle has it open, so one file
    /// has at most one [`super::Journal`] at a time in the whole system.
    #[error(
        "journal {} is already open in another process (a session in it may be live \
         there); stop that process, or use another journal file",
        path.display()
    )]
    AlreadyOpen {
        /// The journal file.
        path: PathBuf,
    },
    /// This process holds the file already (a `Journal` of it, or a session journaling in
    /// it, is live here, or its last handle is still closing), and the call would open it
    /// a second time.
    #[error(
        "journal {} is already open in this process (a Journal or a session of it is live          here); use that handle (Journal::open of the path returns it), or drop it first",
        path.display()
    )]
    OpenInThisProcess {
        /// The journal file.
        path: PathBuf,
    },
    /// The parent directories of the file could not be created.
    #[error("cannot create the directory {} for the journal", path.display())]
    CreateDir {
        /// The directory that could not be created.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A new file could not be built and moved into place.
    #[error("cannot create journal {}", path.display())]
    Create {
        /// The journal file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// redb could not open or create the file (I/O, not a redb file, old format, ...).
    #[error("cannot open journal {}", path.display())]
    Open {
        /// The journal file.
        path: PathBuf,
        /// redb's reason.
        #[source]
        source: StorageError,
    },
    /// The file opened, but its tables could not be created or read.
    #[error("cannot prepare the tables of journal {}", path.display())]
    Init {
        /// The journal file.
        path: PathBuf,
        /// redb's reason.
        #[source]
        source: StorageError,
    },
    /// The write-ahead log beside the file could not be read, created or reset.
    #[error("cannot recover the write-ahead log of journal {}", path.display())]
    WriteAhead {
        /// The journal file.
        path: PathBuf,
        /// Why.
        #[source]
        source: WalError,
    },
    /// The batches found in the write-ahead log could not be written into the file.
    #[error("cannot replay the write-ahead log into journal {}", path.display())]
    Replay {
        /// The journal file.
        path: PathBuf,
        /// redb's reason.
        #[source]
        source: StorageError,
    },
    /// The operating system refused to start the writer thread.
    #[error("cannot start the writer thread of journal {}", path.display())]
    SpawnWriter {
        /// The journal file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why the journal could not append a group of events (a session's commit, or
/// [`super::Journal::import`] as [`ImportError::Append`]).
///
/// Nothing of the group was written, except perhaps on [`AppendError::Storage`] from a
/// commit, which redb says "may already have become durable". Appending the same events
/// again is always safe: appends are idempotent by event id.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The writer thread is gone (it stops only with the last handle, or on a bug).
    #[error("the journal writer has stopped")]
    Closed,
    /// An event could not be encoded; nothing of the group was sent to the writer.
    #[error("cannot encode event {index} of the group")]
    Encode {
        /// The position of the event in the group.
        index: usize,
        /// serde_json's reason.
        #[source]
        source: Arc<serde_json::Error>,
    },
    /// The batch holding this group failed to write or commit. Every group of that batch
    /// gets the same error, and the writer carries on with the next batch.
    #[error("the journal write failed")]
    Storage(#[source] StorageError),
    /// The batch holding this group could not be made durable in the write-ahead log (or,
    /// after an earlier failure, the log could not be reset). Like [`AppendError::Storage`],
    /// every group of the batch gets it, and the writer carries on.
    #[error("the journal's write-ahead log failed")]
    WriteAhead(#[source] Arc<WalError>),
    /// The journal acknowledged an append without a seq for this event, so it cannot be
    /// published in order (rule 2): a bug in the writer, reported rather than hidden.
    #[error("the journal acknowledged event {event} without a sequence number")]
    NoSeq { event: treadle_event::EventId },
    /// The session's write fence refused the append: whatever gave this process the right
    /// to write the session (a lease) is lost. Nothing was written.
    #[error("the session may no longer write here: {why}")]
    Fenced {
        /// Why, as the fence says.
        why: crate::fence::Refused,
    },
}

/// Why [`super::Journal::import`] failed. Nothing was written, except perhaps on
/// [`ImportError::Append`] (see [`AppendError`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A session the events belong to is live in this process (a handle to it is open, or
    /// its loops are still stopping): only its loop actor writes its history (rule 1).
    #[error(
        "session {session} is live in this process and only its own loop may write it; \
         import its events before starting or restoring it, or after its last handle is gone"
    )]
    Live {
        /// The live session.
        session: treadle_event::SessionId,
    },
    /// The journal could not append the group.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// An event of the group breaks a rule of its session's journal (read with what the
    /// journal holds of that session already). Nothing was written.
    #[error(
        "event {index} of the import (session {session}) is refused: {error}; nothing was written"
    )]
    Invalid {
        /// The position of the event in the group.
        index: usize,
        /// Its session.
        session: treadle_event::SessionId,
        /// The rule it breaks.
        #[source]
        error: ShapeError,
    },
    /// What the journal holds of a session could not be read to check the group against.
    #[error("cannot read the journal to check the import")]
    Read(#[source] Arc<ReadError>),
}

/// Why the journal's write-ahead log (`<journal>.wal`) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// A file operation failed.
    #[error("cannot {op} the write-ahead log {}", path.display())]
    Io {
        /// What was being done, as a verb phrase ("sync", "write a record to", ...).
        op: &'static str,
        /// The log file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A batch (or one event of it) is over 4 GiB, the most one log record can hold.
    #[error("a batch part of {bytes} bytes does not fit one write-ahead log record (4 GiB)")]
    TooLarge {
        /// The size that did not fit.
        bytes: usize,
    },
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        WalError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Why a read of the journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// redb could not read the file.
    #[error("the journal read failed")]
    Storage(#[source] StorageError),
    /// A stored value does not decode, or an index entry points at nothing.
    #[error("journal entry seq {seq} is corrupt: {detail}")]
    Corrupt {
        /// The seq of the bad entry.
        seq: u64,
        /// What is wrong with it.
        detail: String,
    },
}

impl ReadError {
    pub(crate) fn storage(error: impl Into<redb::Error>) -> Self {
        ReadError::Storage(StorageError::new(error))
    }
}
