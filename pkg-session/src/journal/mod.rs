//! The durable, append-only event journal on redb.
//!
//! One [`Journal`] owns one redb file and one writer thread. Appends from every session go
//! over a channel to that thread, which group-commits them: many appends, one write
//! transaction, one sync. Reads open their own redb read transaction on the caller's thread
//! and never wait for the writer.
//!
//! # Durability: a write-ahead log in front of redb
//!
//! A durable redb commit costs several fsyncs. In durable mode (the default) the writer
//! instead appends each batch as one checksummed record to `<file>.wal` beside the redb file
//! and syncs that once (`fdatasync`), then commits the batch to redb with
//! `Durability::None`, then acknowledges. Every read still goes to redb. A checkpoint (one
//! durable redb commit, then an emptied log) runs every
//! [`checkpoint_batches`](JournalOptions::checkpoint_batches) logged batches, every
//! [`checkpoint_bytes`](JournalOptions::checkpoint_bytes) of log, and on a clean close.
//! Opening a journal replays the log's complete records into redb (skipping events whose id
//! redb already has, at exactly the seqs they were acknowledged with) and stops at the
//! first torn one, which was never acknowledged; see `wal.rs` for the format and the
//! crash-consistency argument. So a journal killed at any point reopens with every
//! acknowledged append and no part of any other.
//!
//! # Layout of the file
//!
//! * `events.v1`: seq (`u64`) → versioned bytes: a format byte (1 = JSON), then the payload.
//!   Seqs are global to the file and strictly increase from 1.
//! * `event_ids.v1`: event id (`u128`) → seq, which makes appends idempotent (rule 10).
//! * `session_seqs.v1`: (session `u128`, seq) → `()`, for per-session reads in seq order.
//!
//! # Decisions
//!
//! * Events are encoded by the appending task, not the writer thread, so that JSON
//!   serialization scales with the callers and the writer only does storage work.
//! * A batch is atomic as a whole: if its commit fails, every append in it fails with
//!   [`AppendError::Storage`], and the writer continues with the next batch.
//! * Dropping the last handle stops the writer after it has written what was already sent
//!   and checkpointed it, and waits for it, so the file can be opened again as soon as the
//!   drop returns, with nothing to replay.
//! * After a failed durable batch, nothing more is logged until a checkpoint and a reset of
//!   the log succeed: the failed batch may have left a synced record whose seqs redb never
//!   took, and a later batch reusing them must not meet it at replay.
//! * [`Journal::import`], the one write from outside the runtime, is checked against the
//!   shape a session's journal keeps (`shape.rs`: `SessionStarted` first, turns that open
//!   and close, turn ids used once, no turn while stopped), which restore checks too.

mod claims;
mod codec;
mod error;
mod file;
mod recover;
mod registry;
mod shape;
mod tables;
mod view;
mod wal;
mod writer;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wal_tests;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use redb::Database;
use tokio::sync::oneshot;
use treadle_event::{Event, EventId, SessionId};

pub use error::{AppendError, ImportError, JournalOpenError, ReadError, StorageError, WalError};
pub(crate) use shape::Shape;
pub use shape::ShapeError;
pub use view::{JournalStats, JournalView};

use claims::ImportClaim;
pub(crate) use claims::{Claimed, SessionClaim};

use claims::Claims;
use file::{create_parent, prepare};
use recover::recover;
use registry::{Registered, Registry, RemoveOnDrop};
use writer::{Counters, Encoded, Request, Writer};

/// Opens the redb file at `path` for a journal, creating its directories and the file
/// (atomically) if needed. Its owner keeps tables of its own in it and opens the journal
/// inside it with [`Journal::open_in`].
///
/// Only with the `internal-shared-database` feature, for the `treadle` crate's state file;
/// hidden from the docs and not part of the stable API (cargo turns the feature on for
/// every crate built beside `treadle`): without it no redb type is part of this crate's
/// API, and nothing outside the journal opens its file, so nothing can write its tables
/// but the session's loop (rule 1).
#[cfg(feature = "internal-shared-database")]
#[doc(hidden)]
pub fn open_database(path: impl AsRef<Path>) -> Result<redb::Database, JournalOpenError> {
    let path = path.as_ref();
    let key = registry::key(path);
    let registry = Registry::lock();
    if registry.find(&key).is_some() || registry.closing(&key) {
        return Err(JournalOpenError::OpenInThisProcess {
            path: path.to_path_buf(),
        });
    }
    file::open_database(path)
}

/// How a [`Journal`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalOptions {
    /// `true` (the default): each batch is durable before it is acknowledged, through one
    /// `fdatasync` of the write-ahead log. `false`: no log and `Durability::None`, for
    /// benchmarks; a crash may lose recent batches (a clean close still persists them).
    pub durable: bool,
    /// The most events the writer gathers into one transaction (default 1024). One append
    /// larger than this is still written whole, in a batch of its own.
    pub max_batch: usize,
    /// Durable mode: checkpoint (one durable redb commit, then an emptied log) after this
    /// many logged batches (default 1024). Lower means a shorter replay after a crash and
    /// a durable redb commit more often.
    pub checkpoint_batches: u64,
    /// Durable mode: checkpoint once the log holds this many bytes (default 8 MiB), which
    /// also bounds the log file at about twice this.
    pub checkpoint_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            durable: true,
            max_batch: 1024,
            checkpoint_batches: 1024,
            checkpoint_bytes: 8 << 20,
        }
    }
}

/// A handle to one journal file. Cheap to clone; every clone shares the file and the
/// writer thread. A session's own journal is read through
/// [`Session::journal`](crate::Session::journal); a journal file is opened with
/// [`Journal::open`]:
///
/// ```no_run
/// use treadle_session::Journal;
///
/// # fn main() -> Result<(), treadle_session::Error> {
/// let journal = Journal::open(".treadle/journal.redb")?;
/// for session in journal.sessions()? {
///     let events = journal.read(session, 1, None)?;
///     println!("{session}: {} events", events.len());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Journal {
    view: JournalView,
}

/// A journal is also its view: every read of [`JournalView`] works on a [`Journal`].
impl std::ops::Deref for Journal {
    type Target = JournalView;

    fn deref(&self) -> &JournalView {
        &self.view
    }
}

struct Inner {
    path: PathBuf,
    db: Arc<Database>,
    counters: Arc<Counters>,
    // Both are `Option` only so that `Drop` can close the channel before joining.
    requests: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    /// The sessions live in this process (see `claims.rs`).
    claims: Arc<Claims>,
    /// Set for a session's temporary journal: its files go with the last handle. Declared
    /// after `db`, so it drops after the database is closed.
    _temporary: Option<RemoveOnDrop>,
    /// Last: leaves the process's registry of open files once everything above is closed.
    _registered: Registered,
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the journal writer thread panicked");
        }
    }
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.view.inner.path)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens the journal at `path` with default options, creating the parent directories
    /// and the file if needed.
    pub fn open(path: impl AsRef<Path>) -> Result<Journal, JournalOpenError> {
        Self::open_with(path, JournalOptions::default())
    }

    /// Opens the journal at `path`, creating the parent directories and the file if needed.
    ///
    /// A file is open once per process: opening a file this process already has open
    /// returns a handle to that same journal (and `options` are those it was opened with).
    /// Another process holding the file gets [`JournalOpenError::AlreadyOpen`].
    pub fn open_with(
        path: impl AsRef<Path>,
        options: JournalOptions,
    ) -> Result<Journal, JournalOpenError> {
        Self::open_shared(path.as_ref(), options, false)
    }

    /// A journal of its own for a session that was given none, in the temp directory; its
    /// files are removed when its last handle is dropped.
    pub(crate) fn open_temporary() -> Result<Journal, JournalOpenError> {
        let path = std::env::temp_dir()
            .join("treadle")
            .join(format!("session-{}.redb", uuid::Uuid::now_v7()));
        Self::open_shared(&path, JournalOptions::default(), true)
    }

    fn open_shared(
        path: &Path,
        options: JournalOptions,
        temporary: bool,
    ) -> Result<Journal, JournalOpenError> {
        create_parent(path)?;
        let key = registry::key(path);
        // The last handle of this file may be closing on another thread: its writer holds
        // the file's lock for a moment more, and its marker then clears the entry.
        for _ in 0..2000 {
            let mut registry = Registry::lock();
            if let Some(inner) = registry.find(&key) {
                return Ok(Journal {
                    view: JournalView { inner },
                });
            }
            if registry.closing(&key) {
                drop(registry);
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            let journal = Self::open_file(path, options, temporary, key.clone())?;
            registry.insert(key, &journal.view.inner);
            return Ok(journal);
        }
        // Still closing after 10 s: a handle of this process keeps it.
        Err(JournalOpenError::OpenInThisProcess {
            path: path.to_path_buf(),
        })
    }

    fn open_file(
        path: &Path,
        options: JournalOptions,
        temporary: bool,
        key: PathBuf,
    ) -> Result<Journal, JournalOpenError> {
        let db = file::open_database(path)?;
        Self::start(path, Arc::new(db), options, temporary, key)
    }

    /// Opens the journal inside a redb file its caller owns and keeps its own tables in
    /// (the pipeline's state store does), opened with [`open_database`]. Only with the
    /// `internal-shared-database` feature (hidden, unstable, for the `treadle` crate), which
    /// puts redb's `Database` in this crate's API and
    /// lets its holder reach the journal's tables: for an embedder that must keep its own
    /// state in the same file. The journal adds
    /// its tables (`events.v1`, `event_ids.v1`, `session_seqs.v1`, which the owner must
    /// not touch) and its writer thread; redb serializes write transactions, so the
    /// owner's writes simply wait their turn with the journal's batches. The journal never
    /// hands the database out again.
    ///
    /// The file is then open in this process: [`Journal::open`] of the same path returns
    /// this journal while a handle of it lives.
    #[cfg(feature = "internal-shared-database")]
    #[doc(hidden)]
    pub fn open_in(
        path: impl AsRef<Path>,
        db: Arc<Database>,
        options: JournalOptions,
    ) -> Result<Journal, JournalOpenError> {
        let path = path.as_ref();
        let key = registry::key(path);
        let mut registry = Registry::lock();
        if registry.find(&key).is_some() {
            return Err(JournalOpenError::OpenInThisProcess {
                path: path.to_path_buf(),
            });
        }
        let journal = Self::start(path, db, options, false, key.clone())?;
        registry.insert(key, &journal.view.inner);
        Ok(journal)
    }

    /// Prepares the journal's tables in `db`, replays the write-ahead log and starts the
    /// writer thread.
    fn start(
        path: &Path,
        db: Arc<Database>,
        options: JournalOptions,
        temporary: bool,
        key: PathBuf,
    ) -> Result<Journal, JournalOpenError> {
        let path = path.to_path_buf();
        prepare(&db).map_err(|source| JournalOpenError::Init {
            path: path.clone(),
            source: StorageError::new(source),
        })?;
        // After the redb file, whose lock makes this process the only one to touch the log.
        let (wal, replayed) = recover(&db, &path, options.durable)?;
        let last_seq = writer::last_seq(&db).map_err(|source| JournalOpenError::Init {
            path: path.clone(),
            source: StorageError::new(source),
        })?;

        let counters = Arc::new(Counters::default());
        counters.replayed.store(replayed, Ordering::Relaxed);
        let (requests, receiver) = mpsc::channel();
        let writer = Writer {
            db: Arc::clone(&db),
            requests: receiver,
            counters: Arc::clone(&counters),
            wal,
            max_batch: options.max_batch.max(1),
            checkpoint_batches: options.checkpoint_batches.max(1),
            checkpoint_bytes: options.checkpoint_bytes,
            next_seq: last_seq + 1,
            since_checkpoint: 0,
            needs_recovery: false,
        };
        let writer = std::thread::Builder::new()
            .name("treadle-journal".into())
            .spawn(move || writer.run())
            .map_err(|source| JournalOpenError::SpawnWriter {
                path: path.clone(),
                source,
            })?;

        let temporary = temporary.then(|| RemoveOnDrop(path.clone()));
        Ok(Journal {
            view: JournalView {
                inner: Arc::new(Inner {
                    path,
                    db,
                    counters,
                    requests: Some(requests),
                    writer: Some(writer),
                    claims: Arc::default(),
                    _temporary: temporary,
                    _registered: Registered(key),
                }),
            },
        })
    }

    /// Writes events that were journaled elsewhere into this file: a journal rebuilt from a
    /// copy of its events (a mirror, a backup, another machine's file) before
    /// [`SessionBuilder::restore`](crate::SessionBuilder::restore) reads it. Returns the
    /// seq of each event, in order, once the group is committed (durably, by default).
    ///
    /// This is the only write a caller outside the runtime has, and it cannot write the
    /// history of a live session: every session the events belong to is claimed for the
    /// length of the import, so an import into a session with a live handle in this
    /// process (or one still stopping) fails with [`ImportError::Live`], and a restore of
    /// that session waits until the import is written (rule 1). Imports of one session
    /// may run at the same time: they all write events that already exist elsewhere.
    ///
    /// Atomic (one write transaction) and idempotent by event id: an event whose id is
    /// already journaled, or that appears earlier in the group, is not written again; its
    /// existing seq is returned. Cancel-safety: dropping the future does not withdraw the
    /// import once it was sent.
    ///
    /// The events must keep the shape a session's journal has ([`ShapeError`] says which
    /// rule one breaks), read after what the journal holds of each session: its
    /// `SessionStarted` first and only there; a `StepDone` or a terminal inside a turn its
    /// `TurnStarted` opened and nothing has ended; a turn id started once; no
    /// `TurnStarted` while the session is stopped (until a `SessionRestored`). Otherwise
    /// the import is refused with [`ImportError::Invalid`] and nothing is written. Two
    /// imports of one session running at once are each checked against the journal as it
    /// was before either.
    ///
    /// ```
    /// use treadle_session::event::{Event, EventKind, Header, SessionId};
    /// use treadle_session::Journal;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), treadle_session::Error> {
    /// let path = std::env::temp_dir().join(format!("import-{}.redb", std::process::id()));
    /// let journal = Journal::open(&path)?;
    /// let session = SessionId::new();
    /// let kind = EventKind::SessionStarted {
    ///     model: "m".into(),
    ///     endpoint: "http://127.0.0.1:8091/v1".into(),
    ///     system: None,
    ///     parent: None,
    ///     fork: None,
    /// };
    /// let started = Event::new(Header::session(session), kind);
    /// let first = journal.import(vec![started.clone()]).await?;
    /// // Importing the same event again changes nothing.
    /// assert_eq!(journal.import(vec![started.clone()]).await?, first);
    /// assert_eq!(journal.read(session, 1, None)?, vec![(first[0], started)]);
    /// # drop(journal);
    /// # let _ = std::fs::remove_file(&path);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn import(&self, events: Vec<Event>) -> Result<Vec<u64>, ImportError> {
        let mut claims = Vec::new();
        for event in &events {
            let session = event.header.session;
            if claims.iter().any(|c: &ImportClaim| c.session() == session) {
                continue;
            }
            let claim = (self.inner.claims)
                .claim_import(session)
                .map_err(|_| ImportError::Live { session })?;
            claims.push(claim);
        }
        // Checked under the claims: nobody starts the sessions between the check and the write.
        self.check_import(&events)?;
        let seqs = self.append_all(&events).await?;
        // The claims go only now: nobody started the sessions while their events went in.
        drop(claims);
        Ok(seqs)
    }

    /// Checks an import against the rules of each session's journal ([`shape`]), reading
    /// what the journal holds of the session first. An event already journaled, or earlier
    /// in the group, is skipped as the append skips it (by id).
    fn check_import(&self, events: &[Event]) -> Result<(), ImportError> {
        let mut shapes: HashMap<SessionId, shape::Shape> = HashMap::new();
        let mut seen: HashSet<EventId> = HashSet::new();
        for (index, event) in events.iter().enumerate() {
            let session = event.header.session;
            let shape = match shapes.entry(session) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => {
                    let mut shape = shape::Shape::default();
                    let journaled = self
                        .read(session, 0, None)
                        .map_err(|e| ImportError::Read(Arc::new(e)))?;
                    for (_, old) in journaled {
                        seen.insert(old.id());
                        // What is journaled already is taken as it is.
                        let _ = shape.next(&old);
                    }
                    new.insert(shape)
                }
            };
            if !seen.insert(event.id()) {
                continue;
            }
            shape.next(event).map_err(|error| ImportError::Invalid {
                index,
                session,
                error,
            })?;
        }
        Ok(())
    }

    /// Appends one group of events atomically (in one write transaction) and returns the
    /// journal seq of each event, in order, once the group is committed. Only the runtime
    /// appends (the hub, for its session's loop actor); callers outside it have
    /// [`Journal::import`]. Idempotent by event id, like `import`.
    #[cfg(test)]
    pub(crate) async fn append(&self, events: Vec<Event>) -> Result<Vec<u64>, AppendError> {
        self.append_all(&events).await
    }

    /// Appends borrowed events: the session's commits journal the event they then publish,
    /// without a copy of it. Cancel-safety: dropping the future does not withdraw the
    /// append once it was sent.
    pub(crate) async fn append_all(&self, events: &[Event]) -> Result<Vec<u64>, AppendError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let events = events
            .iter()
            .enumerate()
            .map(|(index, event)| {
                let bytes = codec::encode(event).map_err(|source| AppendError::Encode {
                    index,
                    source: Arc::new(source),
                })?;
                Ok(Encoded {
                    id: tables::event_key(event.id()),
                    session: tables::session_key(event.header.session),
                    bytes,
                })
            })
            .collect::<Result<Vec<_>, AppendError>>()?;
        let (reply, acked) = oneshot::channel();
        self.inner
            .requests
            .as_ref()
            .ok_or(AppendError::Closed)?
            .send(Request { events, reply })
            .map_err(|_| AppendError::Closed)?;
        acked.await.map_err(|_| AppendError::Closed)?
    }

    /// Claims `session` for a starting or restored session of this process: refused while
    /// another session handle has it (the single-writer rule, rule 1).
    pub(crate) fn claim(&self, session: SessionId) -> Result<SessionClaim, Claimed> {
        self.inner.claims.claim(session)
    }
}
