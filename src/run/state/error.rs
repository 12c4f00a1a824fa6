//! The state store's errors ([`StateError`]): what opening, reading and writing the state
//! file can meet, redb's own errors kept whole.

use std::path::PathBuf;

use treadle_session::journal::JournalOpenError;

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory for the state file could not be made.
    #[error("cannot create the state directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process has the file open.
    #[error("the state file {0} is in use by another treadle process")]
    Busy(PathBuf),
    /// Another treadle process holds the state file's lock (or it cannot be taken).
    #[error(transparent)]
    Held(#[from] crate::run::state_lock::LockError),
    /// redb could not open the file.
    #[error("cannot open the state file {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why: redb's error, or the journal's (`StorageError`) when the journal opened it.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A read or write failed: redb's error, kept whole (a caller can tell a full disk,
    /// `redb::Error::Io`, from a corrupt file, `redb::Error::Corrupted`).
    #[error("state file error: {0}")]
    Db(#[source] redb::Error),
    /// The session journal in the file could not be opened.
    #[error("state file error: {0}")]
    Journal(#[source] JournalOpenError),
    /// The tables another module keeps in the file (the step cache's records, the resources'
    /// version history) could not be opened.
    #[error("state file error: {0}")]
    Tables(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The blocking task reading or writing the file stopped before it finished (it
    /// panicked, or the runtime is shutting down).
    #[error("state file error: the task using it stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
    /// A lock around the file's writes was poisoned (a thread panicked holding it).
    #[error("state file error: {0}'s lock is poisoned")]
    Poisoned(&'static str),
    /// The events of a run served by another server could not be read from NATS.
    #[error("state file error: NATS: {0}")]
    Nats(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A write failed before (a full disk), and redb takes no more until the file is
    /// opened again.
    #[error(
        "state file error: an earlier write to it failed (is the disk full?), and it takes no more writes until treadle opens it again"
    )]
    EarlierWriteFailed,
    /// A value is in a format this version cannot read (or does not serialise).
    #[error("a record in the state file is in an unknown format ({0})")]
    Format(#[from] crate::stored_json::FormatError),
    /// No run with this id.
    #[error("there is no run {0}")]
    NoRun(u64),
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StateError {
            fn from(e: $t) -> Self { StateError::of_redb(e.into()) }
        }
    )*};
}

impl StateError {
    /// redb's error in the store's words: after a failed write (a full disk) redb refuses
    /// every write with `PreviousIo`, whose own message says nothing of the cause.
    pub(crate) fn of_redb(e: redb::Error) -> Self {
        match e {
            redb::Error::PreviousIo => StateError::EarlierWriteFailed,
            other => StateError::Db(other),
        }
    }
}
db_err!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
