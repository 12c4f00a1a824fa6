//! Tests of the write-ahead log: replay of a crash image, torn and garbage tails, stale
//! generations after a checkpoint, a bad header, and non-durable opens of a durable log.
//!
//! A "crash image" is a copy of the redb file and the log taken while the journal is still
//! open, with no batch in flight: exactly what the page cache holds, which is what a
//! SIGKILL leaves behind. (The proofs crate kills a real child process as well.)

use std::path::{Path, PathBuf};

use treadle_event::{Event, EventKind, Header, SessionId};

use super::wal::{self, HEADER_LEN};
use super::*;

fn numbered(session: SessionId, n: usize) -> Event {
    Event::new(
        Header::session(session),
        EventKind::SessionStopped {
            reason: format!("event {n}"),
        },
    )
}

/// Durable, and no checkpoint unless a test asks for one.
fn lazy() -> JournalOptions {
    JournalOptions {
        checkpoint_batches: u64::MAX,
        checkpoint_bytes: u64::MAX,
        ..JournalOptions::default()
    }
}

/// Appends `groups` groups of 1..=3 events, one group at a time, and returns every event
/// with the seq it was acknowledged with.
async fn fill(journal: &Journal, session: SessionId, groups: usize) -> Vec<(u64, Event)> {
    let mut acked = Vec::new();
    let mut n = 0;
    for g in 0..groups {
        let group: Vec<Event> = (0..=g % 3)
            .map(|_| {
                n += 1;
                numbered(session, n)
            })
            .collect();
        let seqs = journal.append(group.clone()).await.unwrap();
        acked.extend(seqs.into_iter().zip(group));
    }
    acked
}

/// Copies the journal's files into `into` while it is open.
fn crash_image(journal: &Journal, into: &Path) -> PathBuf {
    let db = into.join("image.redb");
    std::fs::copy(journal.path(), &db).unwrap();
    std::fs::copy(wal::path_for(journal.path()), wal::path_for(&db)).unwrap();
    db
}

/// The byte offsets at which each live record of the log at `path` starts, and where the
/// last one ends.
fn record_bounds(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(wal::path_for(path)).unwrap();
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let generation = &bytes[8..16];
    let mut at = HEADER_LEN as usize;
    let mut bounds = vec![at as u64];
    while at + 8 <= bytes.len() {
        let (len, crc) = (word(at) as usize, word(at + 4));
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        let live = len >= 12
            && &body[..8] == generation
            && crc32c::crc32c_append(crc32c::crc32c(&bytes[at..at + 4]), body) == crc;
        if !live {
            break;
        }
        at += 8 + len;
        bounds.push(at as u64);
    }
    bounds
}

#[tokio::test]
async fn wal_crash_image_reopens_with_every_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), lazy()).unwrap();
    let session = SessionId::new();
    let acked = fill(&journal, session, 40).await;
    assert_eq!(journal.stats().checkpoints, 0);
    let image = crash_image(&journal, dir.path());

    let reopened = Journal::open(&image).unwrap();
    assert_eq!(reopened.read(session, 0, None).unwrap(), acked);
    // redb alone had none of it durably: the log brought it back.
    assert_eq!(reopened.stats().replayed, acked.len() as u64);
    let next = reopened
        .append(vec![numbered(session, 1000)])
        .await
        .unwrap();
    assert_eq!(next, vec![acked.len() as u64 + 1]);
    drop(reopened);

    // The replay was checkpointed and the log reset: a second open restores nothing.
    let again = Journal::open(&image).unwrap();
    assert_eq!(again.stats().replayed, 0);
    assert_eq!(
        again.last_seq(session).unwrap(),
        Some(acked.len() as u64 + 1)
    );
}

#[tokio::test]
async fn wal_torn_last_record_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), lazy()).unwrap();
    let session = SessionId::new();
    // The last group (g = 11) has 3 events.
    let acked = fill(&journal, session, 12).await;
    let image = crash_image(&journal, dir.path());
    let bounds = record_bounds(&image);
    assert_eq!(bounds.len(), 13, "one record per group: {bounds:?}");
    let (start, end) = (bounds[11], bounds[12]);

    // Cut the last record in the middle, as a crash during its write would.
    let log = wal::path_for(&image);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.truncate(((start + end) / 2) as usize);
    std::fs::write(&log, &bytes).unwrap();

    let reopened = Journal::open(&image).unwrap();
    let expected = &acked[..acked.len() - 3];
    assert_eq!(reopened.read(session, 0, None).unwrap(), expected);
    // The seqs of the lost group are free again, so seqs stay contiguous.
    let next = reopened
        .append(vec![numbered(session, 1000)])
        .await
        .unwrap();
    assert_eq!(next, vec![expected.len() as u64 + 1]);
}

#[tokio::test]
async fn wal_garbage_after_the_last_record_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), lazy()).unwrap();
    let session = SessionId::new();
    let acked = fill(&journal, session, 9).await;
    let image = crash_image(&journal, dir.path());
    let end = *record_bounds(&image).last().unwrap() as usize;

    let log = wal::path_for(&image);
    let mut bytes = std::fs::read(&log).unwrap();
    // A plausible length followed by noise, then a flipped bit inside a copy of the first
    // record: neither checks out.
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 37 % 251) as u8 + 1).collect();
    bytes[end..end + garbage.len()].copy_from_slice(&garbage);
    std::fs::write(&log, &bytes).unwrap();
    let reopened = Journal::open(&image).unwrap();
    assert_eq!(reopened.read(session, 0, None).unwrap(), acked);
    drop(reopened);

    // A record whose checksum fails in the middle of the log ends it there.
    let journal2_dir = tempfile::tempdir().unwrap();
    let journal2 = Journal::open_with(journal2_dir.path().join("j.redb"), lazy()).unwrap();
    let acked2 = fill(&journal2, session, 6).await;
    let image2 = crash_image(&journal2, journal2_dir.path());
    let bounds = record_bounds(&image2);
    let log2 = wal::path_for(&image2);
    let mut bytes = std::fs::read(&log2).unwrap();
    let flip = (bounds[4] + bounds[5]) / 2;
    bytes[flip as usize] ^= 0x10;
    std::fs::write(&log2, &bytes).unwrap();
    let reopened = Journal::open(&image2).unwrap();
    // Groups 0..4 hold 1+2+3+1 events.
    assert_eq!(reopened.read(session, 0, None).unwrap(), &acked2[..7]);
}

#[tokio::test]
async fn wal_checkpoints_reset_the_log_and_older_records_stay_dead() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        checkpoint_batches: 5,
        ..lazy()
    };
    let journal = Journal::open_with(dir.path().join("j.redb"), options).unwrap();
    let session = SessionId::new();
    // 13 batches: checkpoints after 5 and 10, then 3 records of the new generation lie
    // over the start of the 5 records of the old one.
    let acked = fill(&journal, session, 13).await;
    assert_eq!(journal.stats().checkpoints, 2);
    let image = crash_image(&journal, dir.path());
    assert_eq!(record_bounds(&image).len(), 4, "3 live records");

    let reopened = Journal::open(&image).unwrap();
    assert_eq!(reopened.read(session, 0, None).unwrap(), acked);
    let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=acked.len() as u64).collect::<Vec<_>>());
    // Only the last three batches (groups 10, 11, 12: 2 + 3 + 1 events) came from the log.
    assert_eq!(reopened.stats().replayed, 6);
}

#[tokio::test]
async fn wal_log_bytes_trigger_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        checkpoint_bytes: 2000,
        ..lazy()
    };
    let journal = Journal::open_with(dir.path().join("j.redb"), options).unwrap();
    let session = SessionId::new();
    fill(&journal, session, 30).await;
    assert!(journal.stats().checkpoints >= 3, "{:?}", journal.stats());
}

#[tokio::test]
async fn wal_with_a_bad_header_restarts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let session = SessionId::new();
    let acked = {
        let journal = Journal::open(&path).unwrap();
        fill(&journal, session, 4).await
    };
    // A clean close checkpointed everything; a header that does not check out can only
    // follow that (see wal.rs), so the log's content is not needed.
    let log = wal::path_for(&path);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[3] ^= 0xff;
    std::fs::write(&log, &bytes).unwrap();

    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.read(session, 0, None).unwrap(), acked);
    let next = journal.append(vec![numbered(session, 99)]).await.unwrap();
    assert_eq!(next, vec![acked.len() as u64 + 1]);
    let image = crash_image(&journal, dir.path());
    // The restarted log holds exactly the one new record.
    assert_eq!(record_bounds(&image).len(), 2);
    assert_eq!(
        Journal::open(&image).unwrap().last_seq(session).unwrap(),
        Some(next[0])
    );
}

#[tokio::test]
async fn wal_left_by_a_crash_is_replayed_by_a_non_durable_open_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), lazy()).unwrap();
    let session = SessionId::new();
    let acked = fill(&journal, session, 5).await;
    let image = crash_image(&journal, dir.path());

    let options = JournalOptions {
        durable: false,
        ..JournalOptions::default()
    };
    let reopened = Journal::open_with(&image, options).unwrap();
    assert_eq!(reopened.read(session, 0, None).unwrap(), acked);
    assert!(!wal::path_for(&image).exists());
}

#[tokio::test]
async fn wal_batch_of_duplicates_only_logs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), lazy()).unwrap();
    let session = SessionId::new();
    let event = numbered(session, 1);
    assert_eq!(journal.append(vec![event.clone()]).await.unwrap(), vec![1]);
    assert_eq!(journal.append(vec![event]).await.unwrap(), vec![1]);
    let image = crash_image(&journal, dir.path());
    assert_eq!(record_bounds(&image).len(), 2, "one record");
}
