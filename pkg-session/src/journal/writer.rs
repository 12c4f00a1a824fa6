//! The journal's writer thread: group commit of appends from every session.
//!
//! The thread blocks for one request, drains whatever else is already waiting (up to
//! `max_batch` events), writes all of it in one write transaction, commits once, and only
//! then answers each request. One fsync therefore covers every append that arrived while
//! the previous commit was in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};

use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use tokio::sync::oneshot;

use super::error::AppendError;
use super::tables::{BY_SESSION, EVENTS, IDS};

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
}

pub(crate) struct Writer {
    pub(crate) db: Arc<Database>,
    pub(crate) requests: Receiver<Request>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) durable: bool,
    pub(crate) max_batch: usize,
    /// The seq the next new event gets.
    pub(crate) next_seq: u64,
}

struct Written {
    seqs: Vec<Vec<u64>>,
    new_events: u64,
    duplicates: u64,
}

impl Writer {
    /// Runs until every handle (every sender) is gone and the queue is drained.
    pub(crate) fn run(mut self) {
        let mut unsynced = false;
        while let Ok(first) = self.requests.recv() {
            let mut pending = first.events.len();
            let mut batch = vec![first];
            while pending < self.max_batch {
                match self.requests.try_recv() {
                    Ok(request) => {
                        pending += request.events.len();
                        batch.push(request);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.write(batch);
            unsynced |= !self.durable;
        }
        if unsynced {
            // Commits with Durability::None are only persisted by a later durable commit;
            // make the benchmark mode leave a complete file behind on a clean shutdown.
            if let Err(error) = self.sync() {
                tracing::warn!(%error, "final sync of the journal failed");
            }
        }
    }

    fn write(&mut self, batch: Vec<Request>) {
        match self.write_batch(&batch) {
            Ok(written) => {
                let c = &self.counters;
                c.batches.fetch_add(1, Ordering::Relaxed);
                c.appends.fetch_add(batch.len() as u64, Ordering::Relaxed);
                c.events.fetch_add(written.new_events, Ordering::Relaxed);
                c.duplicates
                    .fetch_add(written.duplicates, Ordering::Relaxed);
                for (request, seqs) in batch.into_iter().zip(written.seqs) {
                    // A caller that stopped waiting does not undo its append.
                    let _ = request.reply.send(Ok(seqs));
                }
            }
            Err(error) => {
                tracing::error!(%error, groups = batch.len(), "journal batch failed");
                self.counters.failed_batches.fetch_add(1, Ordering::Relaxed);
                let events: usize = batch.iter().map(|r| r.events.len()).sum();
                self.recover_next_seq(events as u64);
                let error = Arc::new(error);
                for request in batch {
                    let _ = request
                        .reply
                        .send(Err(AppendError::Storage(Arc::clone(&error))));
                }
            }
        }
    }

    fn write_batch(&mut self, batch: &[Request]) -> Result<Written, redb::Error> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(if self.durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        let mut next_seq = self.next_seq;
        let mut written = Written {
            seqs: Vec::with_capacity(batch.len()),
            new_events: 0,
            duplicates: 0,
        };
        {
            let mut events = txn.open_table(EVENTS)?;
            let mut ids = txn.open_table(IDS)?;
            let mut by_session = txn.open_table(BY_SESSION)?;
            for request in batch {
                let mut seqs = Vec::with_capacity(request.events.len());
                for event in &request.events {
                    // The id table sees this transaction's own inserts, so a duplicate inside
                    // the batch resolves to the seq given a moment ago.
                    let existing = ids.get(event.id)?.map(|seq| seq.value());
                    if let Some(seq) = existing {
                        written.duplicates += 1;
                        seqs.push(seq);
                        continue;
                    }
                    let seq = next_seq;
                    next_seq += 1;
                    events.insert(seq, event.bytes.as_slice())?;
                    ids.insert(event.id, seq)?;
                    by_session.insert((event.session, seq), ())?;
                    written.new_events += 1;
                    seqs.push(seq);
                }
                written.seqs.push(seqs);
            }
        }
        txn.commit()?;
        self.next_seq = next_seq;
        Ok(written)
    }

    /// After a failed batch the commit may or may not have reached the disk, so the next
    /// seq is re-read from the file; if even that fails, the seqs the batch might have used
    /// are skipped, because reusing one would overwrite an event.
    fn recover_next_seq(&mut self, attempted: u64) {
        let from_file = (|| -> Result<Option<u64>, redb::Error> {
            let txn = self.db.begin_read()?;
            let events = txn.open_table(EVENTS)?;
            Ok(events.last()?.map(|(seq, _)| seq.value()))
        })();
        self.next_seq = match from_file {
            Ok(last) => last.map_or(1, |seq| seq + 1).max(self.next_seq),
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
