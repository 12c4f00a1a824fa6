//! The journal's writer thread: group commit of appends from every session.
//!
//! The thread blocks for one request, drains whatever else is already waiting (up to
//! `max_batch` events), writes all of it in one write transaction, makes it durable once,
//! and only then answers each request. One sync therefore covers every append that arrived
//! while the previous batch was being written.
//!
//! In durable mode that sync is one `fdatasync` of the write-ahead log (`wal.rs`): the
//! batch's new events are logged and synced while its redb transaction is still open, and
//! the transaction is then committed with `Durability::None`. Readers therefore only ever
//! see events that are already durable, and redb's own (several-fsync) durable commit runs
//! only at checkpoints: every `checkpoint_batches` logged batches, every `checkpoint_bytes`
//! of log, and when the writer stops.
//!
//! # When to drain: one yield after waking, while appends come from several sessions
//!
//! A batch's cost is mostly fixed (a redb commit, a log write and its sync, the wake-ups),
//! so the fewer batches per event, the less CPU per event. The writer drains what is queued
//! when it takes the first request, so a batch holds what the sessions sent while the
//! writer was busy with the one before. Blocked on an empty queue, though, the writer is
//! woken by the first `send` of the next round, and when the sessions' runtime shares its
//! core (a current-thread runtime, a process pinned to one core, a busy machine) the
//! scheduler lets the freshly woken writer preempt the runtime at once, before the other
//! sessions of that round have sent theirs: batches of one or two appends, one sync each.
//!
//! So after a blocking wait the writer yields its core once (`sched_yield`) before it
//! drains, if one of the last [`SHARED_WINDOW`] batches held more than one append. The
//! runtime then finishes its round (until it parks or its time slice ends) and the batch
//! takes everything that round sent. Why this rule:
//! * A lone session never waits for it: its batches hold one append each, so the writer
//!   never yields. (An unconditional yield costs a lone session a time slice whenever an
//!   unrelated process shares the core, since the yield hands the core to that process.)
//! * Where several sessions append, the yield costs at most one slice of the runtime's work,
//!   which is the work that fills the batch; with the core to itself the yield returns at
//!   once (nothing else is runnable) and costs one system call.
//! * A window, not the last batch only: with "yield if the last batch held several", a
//!   batch of one (the preemption above) turns the rule off for the next one and batches
//!   alternate between one and many. 16 batches keep it on through such dips and let it go
//!   within 16 syncs once a single session is left.
//! * Only after a blocking wait: a queue that is already non-empty was filled while the
//!   writer worked, which is the batching the design gives without help.
//!
//! Measured with benches/pinned.py's driver (one core, current-thread runtime), the journal
//! on tmpfs so that the sync's latency does not hide the scheduling; syncs per step of the
//! turns, 20 tool steps x 100 sessions: 0.56 without the yield, 0.21 with "yield if the
//! last batch held several", 0.04 with this rule (about 30 appends per batch); CPU per step
//! -7% at 20 x 100, -17% at 5 x 1,000, unchanged at 200 x 1.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, WriteTransaction};
use tokio::sync::oneshot;

use super::error::{AppendError, StorageError, WalError};
use super::tables::{BY_SESSION, EVENTS, IDS};
use super::wal::{Entry, Wal};

/// How many batches after the last one that held more than one append the writer still
/// yields once before draining (see the module's header).
const SHARED_WINDOW: u32 = 16;

/// Whether one of the last [`SHARED_WINDOW`] batches held more than one append: the
/// writer's rule for yielding before it drains (see the module's header).
struct Shared {
    /// Batches written since the last one with more than one append.
    since: u32,
}

impl Default for Shared {
    /// None in the window yet, as for a lone session.
    fn default() -> Self {
        Shared {
            since: SHARED_WINDOW,
        }
    }
}

impl Shared {
    fn recent(&self) -> bool {
        self.since < SHARED_WINDOW
    }

    /// Counts a written batch of `appends` requests.
    fn record(&mut self, appends: usize) {
        self.since = if appends > 1 {
            0
        } else {
            self.since.saturating_add(1)
        };
    }
}

/// One event, encoded by the caller so that serialization runs on many threads, not here.
pub(crate) struct Encoded {
    pub(crate) id: u128,
    pub(crate) session: u128,
    pub(crate) bytes: Vec<u8>,
}

/// One call of `Journal::append`: a group that is written atomically.
pub(crate) struct Request {
    pub(crate) events: Vec<Encoded>,
    pub(crate) reply: oneshot::Sender<Result<Vec<u64>, AppendError>>,
}

/// Counters shared with the handles; relaxed, since they are only reported.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) batches: AtomicU64,
    pub(crate) appends: AtomicU64,
    pub(crate) events: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) failed_batches: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) log_append_micros: AtomicU64,
}

pub(crate) struct Writer {
    pub(crate) db: Arc<Database>,
    pub(crate) requests: Receiver<Request>,
    pub(crate) counters: Arc<Counters>,
    /// `Some` in durable mode.
    pub(crate) wal: Option<Wal>,
    pub(crate) max_batch: usize,
    /// Checkpoint after this many logged batches...
    pub(crate) checkpoint_batches: u64,
    /// ...or once the log holds this many bytes, whichever comes first.
    pub(crate) checkpoint_bytes: u64,
    /// The seq the next new event gets.
    pub(crate) next_seq: u64,
    /// Logged batches since the last checkpoint.
    pub(crate) since_checkpoint: u64,
    /// A durable batch or checkpoint failed. Until a checkpoint and a log reset succeed,
    /// nothing more is logged (see [`Writer::recover`]).
    pub(crate) needs_recovery: bool,
}

struct Written {
    seqs: Vec<Vec<u64>>,
    new_events: u64,
    duplicates: u64,
}

/// Why a batch failed.
#[derive(Debug)]
enum BatchError {
    Redb(redb::Error),
    Wal(WalError),
}

fn redb_error(error: impl Into<redb::Error>) -> BatchError {
    BatchError::Redb(error.into())
}

impl From<BatchError> for AppendError {
    fn from(error: BatchError) -> Self {
        match error {
            BatchError::Redb(error) => AppendError::Storage(StorageError::new(error)),
            BatchError::Wal(error) => AppendError::WriteAhead(Arc::new(error)),
        }
    }
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Redb(error) => error.fmt(f),
            BatchError::Wal(error) => error.fmt(f),
        }
    }
}

impl Writer {
    /// Runs until every handle (every sender) is gone and the queue is drained.
    pub(crate) fn run(mut self) {
        let mut unsynced = false;
        // Kept across batches for its allocation.
        let mut batch = Vec::new();
        let mut shared = Shared::default();
        while let Some(first) = self.next_request(shared.recent()) {
            let mut pending = first.events.len();
            batch.push(first);
            while pending < self.max_batch {
                match self.requests.try_recv() {
                    Ok(request) => {
                        pending += request.events.len();
                        batch.push(request);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            shared.record(batch.len());
            self.write(&mut batch);
            unsynced = true;
        }
        if unsynced || self.needs_recovery {
            // A clean close leaves redb complete and durable and the log empty, so the
            // next open has nothing to replay. In non-durable mode this is the only point
            // at which the batches are persisted at all.
            let done = if self.wal.is_some() {
                self.checkpoint()
            } else {
                self.sync().map_err(BatchError::Redb)
            };
            if let Err(error) = done {
                tracing::warn!(%error, "final checkpoint of the journal failed");
            }
        }
    }

    /// The first request of the next batch, `None` once every sender is gone. After a
    /// blocking wait, `yield_first` gives the core away once, so that the sessions woken
    /// with this request's sender can send theirs before the batch is drained.
    fn next_request(&self, yield_first: bool) -> Option<Request> {
        match self.requests.try_recv() {
            Ok(request) => Some(request),
            Err(TryRecvError::Disconnected) => None,
            Err(TryRecvError::Empty) => {
                let request = self.requests.recv().ok()?;
                if yield_first {
                    std::thread::yield_now();
                }
                Some(request)
            }
        }
    }

    /// Writes `batch` and answers each of its requests, leaving `batch` empty.
    fn write(&mut self, batch: &mut Vec<Request>) {
        let result = if self.needs_recovery {
            self.recover()
        } else {
            Ok(())
        };
        match result.and_then(|()| self.write_batch(batch)) {
            Ok(written) => {
                let c = &self.counters;
                c.batches.fetch_add(1, Ordering::Relaxed);
                c.appends.fetch_add(batch.len() as u64, Ordering::Relaxed);
                c.events.fetch_add(written.new_events, Ordering::Relaxed);
                c.duplicates
                    .fetch_add(written.duplicates, Ordering::Relaxed);
                for (request, seqs) in batch.drain(..).zip(written.seqs) {
                    // A caller that stopped waiting does not undo its append.
                    let _ = request.reply.send(Ok(seqs));
                }
                if written.new_events > 0 {
                    self.maybe_checkpoint();
                }
            }
            Err(error) => {
                tracing::error!(%error, groups = batch.len(), "journal batch failed");
                self.counters.failed_batches.fetch_add(1, Ordering::Relaxed);
                if self.wal.is_some() {
                    self.needs_recovery = true;
                } else {
                    let events: usize = batch.iter().map(|r| r.events.len()).sum();
                    self.recover_next_seq(events as u64);
                }
                let error = AppendError::from(error);
                for request in batch.drain(..) {
                    let _ = request.reply.send(Err(error.clone()));
                }
            }
        }
    }

    fn write_batch(&mut self, batch: &[Request]) -> Result<Written, BatchError> {
        let mut txn = self.db.begin_write().map_err(redb_error)?;
        // Durable mode makes the batch durable in the log below, not through redb.
        txn.set_durability(Durability::None).map_err(redb_error)?;
        let (written, entries, next_seq) =
            stage(&txn, batch, self.next_seq).map_err(BatchError::Redb)?;
        if let Some(wal) = self.wal.as_mut()
            && !entries.is_empty()
        {
            // Logged and synced before the commit, so that no reader of redb ever sees an
            // event a crash could still take back. A batch of duplicates only has nothing
            // to log: what it answers with was logged (or checkpointed) before.
            let started = std::time::Instant::now();
            let appended = wal.append(&entries);
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.counters
                .log_append_micros
                .fetch_add(micros, Ordering::Relaxed);
            if let Err(error) = appended {
                drop(entries);
                if let Err(abort) = txn.abort() {
                    tracing::warn!(error = %abort, "aborting a failed journal batch failed");
                }
                return Err(BatchError::Wal(error));
            }
            self.since_checkpoint += 1;
        }
        txn.commit().map_err(redb_error)?;
        self.next_seq = next_seq;
        Ok(written)
    }

    fn maybe_checkpoint(&mut self) {
        let Some(wal) = &self.wal else { return };
        if self.since_checkpoint < self.checkpoint_batches && wal.used() < self.checkpoint_bytes {
            return;
        }
        if let Err(error) = self.checkpoint() {
            tracing::warn!(%error, "journal checkpoint failed; retrying before the next batch");
            self.needs_recovery = true;
        }
    }

    /// Makes every committed batch durable in redb, then empties the log.
    ///
    /// Order matters: the log is reset only after redb's durable commit returned, so at
    /// every instant each acknowledged batch is durable in one of the two. A crash between
    /// the two steps replays batches redb already has, which the replay skips by id.
    fn checkpoint(&mut self) -> Result<(), BatchError> {
        self.sync().map_err(BatchError::Redb)?;
        if let Some(wal) = self.wal.as_mut() {
            wal.reset().map_err(BatchError::Wal)?;
        }
        self.since_checkpoint = 0;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs before the first batch after a failed durable batch or checkpoint.
    ///
    /// A failed batch may have left a complete, synced record in the log whose redb
    /// transaction never committed. Its seqs are free in redb, so the next batch would
    /// reuse them, and a replay would then meet two events at one seq. Resetting the log
    /// (after a checkpoint, so that no acknowledged batch depends on it) drops that record;
    /// until the reset succeeds nothing is logged, so no record can conflict with it.
    fn recover(&mut self) -> Result<(), BatchError> {
        self.checkpoint()?;
        self.next_seq = last_seq(&self.db).map_err(BatchError::Redb)? + 1;
        self.needs_recovery = false;
        Ok(())
    }

    /// After a failed non-durable batch the commit may or may not have reached the file, so
    /// the next seq is re-read; if even that fails, the seqs the batch might have used are
    /// skipped, because reusing one would overwrite an event.
    fn recover_next_seq(&mut self, attempted: u64) {
        self.next_seq = match last_seq(&self.db) {
            Ok(last) => (last + 1).max(self.next_seq),
            Err(_) => self.next_seq + attempted,
        };
    }

    fn sync(&self) -> Result<(), redb::Error> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        Ok(())
    }
}

/// Inserts the batch's new events into the open transaction and returns the seqs of every
/// request, the new events as log entries, and the next free seq.
fn stage<'b>(
    txn: &WriteTransaction,
    batch: &'b [Request],
    mut next_seq: u64,
) -> Result<(Written, Vec<Entry<'b>>, u64), redb::Error> {
    let mut written = Written {
        seqs: Vec::with_capacity(batch.len()),
        new_events: 0,
        duplicates: 0,
    };
    let mut entries = Vec::new();
    let mut events = txn.open_table(EVENTS)?;
    let mut ids = txn.open_table(IDS)?;
    let mut by_session = txn.open_table(BY_SESSION)?;
    for request in batch {
        let mut seqs = Vec::with_capacity(request.events.len());
        for event in &request.events {
            let seq = next_seq;
            // Inserted first and put back when it was there already: one descent of the id
            // table per new event instead of a lookup and then an insert, and duplicates are
            // rare. The id table sees this transaction's own inserts, so a duplicate inside
            // the batch resolves to the seq given a moment ago.
            let existing = ids.insert(event.id, seq)?.map(|old| old.value());
            if let Some(seq) = existing {
                ids.insert(event.id, seq)?;
                written.duplicates += 1;
                seqs.push(seq);
                continue;
            }
            next_seq += 1;
            events.insert(seq, event.bytes.as_slice())?;
            by_session.insert((event.session, seq), ())?;
            entries.push(Entry {
                seq,
                id: event.id,
                session: event.session,
                bytes: &event.bytes,
            });
            written.new_events += 1;
            seqs.push(seq);
        }
        written.seqs.push(seqs);
    }
    Ok((written, entries, next_seq))
}

/// The last seq in the file, 0 when it has none.
pub(crate) fn last_seq(db: &Database) -> Result<u64, redb::Error> {
    let txn = db.begin_read()?;
    let events = txn.open_table(EVENTS)?;
    Ok(events.last()?.map_or(0, |(seq, _)| seq.value()))
}

#[cfg(test)]
mod tests {
    use super::{SHARED_WINDOW, Shared};

    #[test]
    fn writer_yields_only_within_the_window_after_a_shared_batch() {
        let mut shared = Shared::default();
        // A lone session: never.
        for _ in 0..100 {
            assert!(!shared.recent());
            shared.record(1);
        }
        // One batch of several turns it on, and batches of one keep it on for the window...
        shared.record(3);
        for _ in 0..SHARED_WINDOW {
            assert!(shared.recent());
            shared.record(1);
        }
        // ...after which it is off until the next shared batch.
        assert!(!shared.recent());
        shared.record(2);
        assert!(shared.recent());
    }
}
