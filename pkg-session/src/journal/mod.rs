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

mod claims;
mod codec;
mod error;
mod file;
mod recover;
mod registry;
mod tables;
mod wal;
mod writer;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wal_tests;

use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase};
use tokio::sync::oneshot;
use treadle_event::{Event, SessionId};

pub use error::{AppendError, JournalOpenError, ReadError, WalError};

pub(crate) use claims::{Claimed, SessionClaim};
use tables::{BY_SESSION, EVENTS, IDS};

use claims::Claims;
pub use file::open_database;
use file::{create_parent, prepare};
use recover::recover;
use registry::{Registered, Registry, RemoveOnDrop};
use writer::{Counters, Encoded, Request, Writer};

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

/// What the writer has done since the journal was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Committed write transactions.
    pub batches: u64,
    /// Acknowledged [`Journal::append`] calls.
    pub appends: u64,
    /// Events newly written (duplicates excluded).
    pub events: u64,
    /// Events whose id was already journaled, answered with the existing seq.
    pub duplicates: u64,
    /// Batches whose write or commit failed.
    pub failed_batches: u64,
    /// Checkpoints of the write-ahead log into redb (durable mode).
    pub checkpoints: u64,
    /// Events found in the write-ahead log at open that redb did not have yet, and that
    /// were restored from it.
    pub replayed: u64,
    /// Time the writer spent appending batches to the write-ahead log, its `fdatasync`
    /// included, in µs (durable mode; 0 otherwise): what durability costs, measured where
    /// it is paid.
    pub log_append_micros: u64,
}

/// A handle to one journal file. Cheap to clone; every clone shares the file and the
/// writer thread.
///
/// ```
/// use treadle_event::{Event, EventKind, Header, SessionId};
/// use treadle_session::journal::Journal;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let journal = Journal::open(dir.path().join("journal.redb"))?;
///
/// let session = SessionId::new();
/// let stopped = Event::new(
///     Header::session(session),
///     EventKind::SessionStopped { reason: "done".into() },
/// );
/// let seqs = journal.append(vec![stopped.clone()]).await?;
/// assert_eq!(seqs, vec![1]);
///
/// // Appending the same event again changes nothing.
/// assert_eq!(journal.append(vec![stopped.clone()]).await?, vec![1]);
///
/// assert_eq!(journal.read(session, 1, None)?, vec![(1, stopped)]);
/// assert_eq!(journal.last_seq(session)?, Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
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
            .field("path", &self.inner.path)
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
                return Ok(Journal { inner });
            }
            if registry.closing(&key) {
                drop(registry);
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            let journal = Self::open_file(path, options, temporary, key.clone())?;
            registry.insert(key, &journal.inner);
            return Ok(journal);
        }
        Err(JournalOpenError::AlreadyOpen {
            path: path.to_path_buf(),
        })
    }

    fn open_file(
        path: &Path,
        options: JournalOptions,
        temporary: bool,
        key: PathBuf,
    ) -> Result<Journal, JournalOpenError> {
        let db = open_database(path)?;
        Self::start(path, Arc::new(db), options, temporary, key)
    }

    /// Opens the journal inside a redb file its caller owns and keeps its own tables in
    /// (the pipeline's state store does), opened with [`open_database`]. The journal adds
    /// its tables (`events.v1`, `event_ids.v1`, `session_seqs.v1`, which the owner must
    /// not touch) and its writer thread; redb serializes write transactions, so the
    /// owner's writes simply wait their turn with the journal's batches. The journal never
    /// hands the database out again.
    ///
    /// The file is then open in this process: [`Journal::open`] of the same path returns
    /// this journal while a handle of it lives.
    pub fn open_in(
        path: impl AsRef<Path>,
        db: Arc<Database>,
        options: JournalOptions,
    ) -> Result<Journal, JournalOpenError> {
        let path = path.as_ref();
        let key = registry::key(path);
        let mut registry = Registry::lock();
        if registry.find(&key).is_some() {
            return Err(JournalOpenError::AlreadyOpen {
                path: path.to_path_buf(),
            });
        }
        let journal = Self::start(path, db, options, false, key.clone())?;
        registry.insert(key, &journal.inner);
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
            source,
        })?;
        // After the redb file, whose lock makes this process the only one to touch the log.
        let (wal, replayed) = recover(&db, &path, options.durable)?;
        let last_seq = writer::last_seq(&db).map_err(|source| JournalOpenError::Init {
            path: path.clone(),
            source,
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
        })
    }

    /// Appends one group of events atomically (in one write transaction) and returns the
    /// journal seq of each event, in order, once the group is committed (durably, by
    /// default).
    ///
    /// Idempotent by event id: an event whose id is already journaled, or that appears
    /// earlier in the same batch, is not written again; its existing seq is returned.
    ///
    /// Cancel-safety: dropping the future does not withdraw the append once it was sent.
    pub async fn append(&self, events: Vec<Event>) -> Result<Vec<u64>, AppendError> {
        self.append_all(&events).await
    }

    /// [`Journal::append`] of borrowed events: the session's commits journal the event
    /// they then publish, without a copy of it.
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

    /// This session's events with seq ≥ `from_seq`, ascending, at most `limit` of them.
    pub fn read(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: Option<usize>,
    ) -> Result<Vec<(u64, Event)>, ReadError> {
        self.read_range(session, from_seq.., limit)
    }

    /// This session's events whose seq is in `seqs`, ascending, at most `limit` of them.
    pub fn read_range(
        &self,
        session: SessionId,
        seqs: impl RangeBounds<u64>,
        limit: Option<usize>,
    ) -> Result<Vec<(u64, Event)>, ReadError> {
        let Some((low, high)) = inclusive(&seqs) else {
            return Ok(Vec::new());
        };
        let limit = limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let txn = self.inner.db.begin_read().map_err(ReadError::storage)?;
        let index = txn.open_table(BY_SESSION).map_err(ReadError::storage)?;
        let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
        let key = tables::session_key(session);
        let mut out = Vec::new();
        for entry in index
            .range((key, low)..=(key, high))
            .map_err(ReadError::storage)?
        {
            let (_, seq) = entry.map_err(ReadError::storage)?.0.value();
            let stored = events
                .get(seq)
                .map_err(ReadError::storage)?
                .ok_or_else(|| ReadError::Corrupt {
                    seq,
                    detail: format!(
                        "the index of session {session} names it, but no event is stored"
                    ),
                })?;
            let event = codec::decode(stored.value()).map_err(|error| ReadError::Corrupt {
                seq,
                detail: error.to_string(),
            })?;
            out.push((seq, event));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The seq of this session's last journaled event, if it has any.
    pub fn last_seq(&self, session: SessionId) -> Result<Option<u64>, ReadError> {
        let txn = self.inner.db.begin_read().map_err(ReadError::storage)?;
        let index = txn.open_table(BY_SESSION).map_err(ReadError::storage)?;
        let key = tables::session_key(session);
        let last = index
            .range((key, 0)..=(key, u64::MAX))
            .map_err(ReadError::storage)?
            .next_back()
            .transpose()
            .map_err(ReadError::storage)?;
        Ok(last.map(|(k, _)| k.value().1))
    }

    /// Every session with at least one journaled event, in id (creation time) order.
    pub fn sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        let txn = self.inner.db.begin_read().map_err(ReadError::storage)?;
        let index = txn.open_table(BY_SESSION).map_err(ReadError::storage)?;
        let mut out = Vec::new();
        let mut from = 0u128;
        // Seek past each session's entries instead of scanning them: cost grows with the
        // number of sessions, not events.
        loop {
            let next = index
                .range((from, 0)..)
                .map_err(ReadError::storage)?
                .next()
                .transpose()
                .map_err(ReadError::storage)?;
            let Some((k, _)) = next else { break };
            let session = k.value().0;
            out.push(tables::session_from_key(session));
            match session.checked_add(1) {
                Some(after) => from = after,
                None => break,
            }
        }
        Ok(out)
    }

    /// The seq the event with this id was journaled at, if it was.
    pub fn seq_of(&self, id: treadle_event::EventId) -> Result<Option<u64>, ReadError> {
        let txn = self.inner.db.begin_read().map_err(ReadError::storage)?;
        let ids = txn.open_table(IDS).map_err(ReadError::storage)?;
        let seq = ids.get(tables::event_key(id)).map_err(ReadError::storage)?;
        Ok(seq.map(|s| s.value()))
    }

    /// Claims `session` for a starting or restored session of this process: refused while
    /// another session handle has it (the single-writer rule, rule 1).
    pub(crate) fn claim(&self, session: SessionId) -> Result<SessionClaim, Claimed> {
        self.inner.claims.claim(session)
    }

    /// The file this journal writes.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the writer has done since this journal was opened.
    pub fn stats(&self) -> JournalStats {
        let c = &self.inner.counters;
        JournalStats {
            batches: c.batches.load(Ordering::Relaxed),
            appends: c.appends.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            failed_batches: c.failed_batches.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            replayed: c.replayed.load(Ordering::Relaxed),
            log_append_micros: c.log_append_micros.load(Ordering::Relaxed),
        }
    }
}

/// `seqs` as an inclusive pair, or `None` when it holds no seq.
fn inclusive(seqs: &impl RangeBounds<u64>) -> Option<(u64, u64)> {
    let low = match seqs.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let high = match seqs.end_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (low <= high).then_some((low, high))
}
