//! [`JournalView`]: a journal's reads, without its writes. This is what a [`Session`]
//! hands out ([`Session::journal`]), so that nothing holding a session can write its
//! history from outside the loop actor (rule 1).
//!
//! [`Session`]: crate::Session
//! [`Session::journal`]: crate::Session::journal

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use redb::ReadableDatabase;
use treadle_event::{Event, SessionId};

use super::error::ReadError;
use super::tables::{self, BY_SESSION, EVENTS, IDS};
use super::{Inner, codec};

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

/// Every read of one journal file, and no write. Cheap to clone; every clone reads the same
/// file. A [`Journal`](super::Journal) dereferences to its view, so these methods are also
/// the journal's.
///
/// Reads open their own redb read transaction on the calling thread: each is a short
/// blocking call (the file's pages, usually cached), never a wait for the writer.
///
/// Appending through a session's view does not compile:
///
/// ```compile_fail
/// # async fn demo(session: treadle_session::Session, event: treadle_session::event::Event) {
/// session.journal().append(vec![event]).await;
/// # }
/// ```
///
/// and neither does importing, which needs the [`Journal`](super::Journal) itself:
///
/// ```compile_fail
/// # async fn demo(session: treadle_session::Session, event: treadle_session::event::Event) {
/// session.journal().import(vec![event]).await;
/// # }
/// ```
#[derive(Clone)]
pub struct JournalView {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for JournalView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalView")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl JournalView {
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
