//! Opening a journal after a crash: the write-ahead log's complete records replayed into redb.

use std::path::Path;

use redb::{Database, Durability, ReadableTable};

use super::tables::{BY_SESSION, EVENTS, IDS};
use super::wal::{self, Replayed, Wal};
use super::{JournalOpenError, StorageError};

/// Replays the write-ahead log beside `path` into `db`, if there is one, and returns the log
/// ready for appends (durable mode) and the number of events restored from it.
///
/// The replay commits durably before the log is reset (durable mode) or removed
/// (non-durable mode, which keeps no log but must not lose what a durable run left in one).
/// A crash in between replays the same records again, which changes nothing.
pub(super) fn recover(
    db: &Database,
    path: &Path,
    durable: bool,
) -> Result<(Option<Wal>, u64), JournalOpenError> {
    let wal_error = |source| JournalOpenError::WriteAhead {
        path: path.to_path_buf(),
        source,
    };
    let replay_error = |source: redb::Error| JournalOpenError::Replay {
        path: path.to_path_buf(),
        source: StorageError::new(source),
    };
    let wal_path = wal::path_for(path);
    if durable {
        let (mut wal, records) = Wal::open(wal_path).map_err(wal_error)?;
        let replayed = replay(db, &records).map_err(replay_error)?;
        wal.reset().map_err(wal_error)?;
        if replayed > 0 {
            tracing::info!(log = %wal.path().display(), replayed, "journal replayed its write-ahead log");
        }
        return Ok((Some(wal), replayed));
    }
    let Some(records) = Wal::read_existing(&wal_path).map_err(wal_error)? else {
        return Ok((None, 0));
    };
    let replayed = replay(db, &records).map_err(replay_error)?;
    if let Err(error) = std::fs::remove_file(&wal_path) {
        // Harmless if it stays: a later open replays it again and skips every event.
        tracing::warn!(%error, log = %wal_path.display(), "cannot remove the replayed write-ahead log");
    }
    Ok((None, replayed))
}

/// Writes the logged events that redb does not have, in one durable transaction.
fn replay(db: &Database, records: &[Vec<Replayed>]) -> Result<u64, redb::Error> {
    if records.is_empty() {
        return Ok(0);
    }
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let mut restored = 0;
    {
        let mut events = txn.open_table(EVENTS)?;
        let mut ids = txn.open_table(IDS)?;
        let mut by_session = txn.open_table(BY_SESSION)?;
        for entry in records.iter().flatten() {
            // Already there when redb was made durable after the record was logged (by a
            // checkpoint that was not followed by its reset, or by another writer's durable
            // commit to the same file).
            if ids.get(entry.id)?.is_some() {
                continue;
            }
            // The writer never logs a seq that redb or an earlier record holds (it resets the
            // log after any failed batch), so this means the files do not belong together.
            // Never overwrite a stored event.
            if events.get(entry.seq)?.is_some() {
                tracing::error!(
                    seq = entry.seq,
                    "the write-ahead log holds another event at a seq the journal already has; skipping it"
                );
                continue;
            }
            events.insert(entry.seq, entry.bytes.as_slice())?;
            ids.insert(entry.id, entry.seq)?;
            by_session.insert((entry.session, entry.seq), ())?;
            restored += 1;
        }
    }
    txn.commit()?;
    Ok(restored)
}
