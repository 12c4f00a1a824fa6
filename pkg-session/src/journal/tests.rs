//! Tests of the journal: round trip, seq order, idempotence, batching, corruption, locking.

use std::collections::BTreeSet;

use treadle_event::{Event, EventKind, Header, LoopId, SessionId};

use super::*;
use tables::EVENTS;

fn stopped(session: SessionId, reason: &str) -> Event {
    Event::new(
        Header::session(session),
        EventKind::SessionStopped {
            reason: reason.into(),
        },
    )
}

fn started(session: SessionId) -> Event {
    Event::new(
        Header::session(session),
        EventKind::SessionStarted {
            model: "m".into(),
            endpoint: "e".into(),
            system: None,
            parent: None,
            fork: None,
        },
    )
}

fn interrupted(session: SessionId, loop_id: LoopId) -> Event {
    Event::new(
        Header::in_loop(session, loop_id),
        EventKind::TurnInterrupted {
            reason: "test".into(),
            steps: 0,
            usage: Default::default(),
        },
    )
}

fn fast() -> JournalOptions {
    JournalOptions {
        durable: false,
        ..Default::default()
    }
}

#[tokio::test]
async fn journal_round_trip_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("nested/dirs/j.redb")).unwrap();
    let (a, b) = (SessionId::new(), SessionId::new());
    let a1 = stopped(a, "a1");
    let b1 = interrupted(b, LoopId::new());
    let a2 = interrupted(a, LoopId::new());
    assert_eq!(journal.append(vec![a1.clone()]).await.unwrap(), vec![1]);
    assert_eq!(
        journal.append(vec![b1.clone(), a2.clone()]).await.unwrap(),
        vec![2, 3]
    );
    assert_eq!(
        journal.read(a, 0, None).unwrap(),
        vec![(1, a1.clone()), (3, a2.clone())]
    );
    assert_eq!(journal.read(a, 2, None).unwrap(), vec![(3, a2)]);
    assert_eq!(journal.read(a, 0, Some(1)).unwrap(), vec![(1, a1)]);
    assert_eq!(journal.read(b, 0, None).unwrap(), vec![(2, b1)]);
    assert_eq!(journal.read_range(a, 2..3, None).unwrap(), vec![]);
    assert_eq!(journal.last_seq(a).unwrap(), Some(3));
    assert_eq!(journal.last_seq(b).unwrap(), Some(2));
    assert_eq!(journal.last_seq(SessionId::new()).unwrap(), None);
    assert_eq!(journal.sessions().unwrap(), vec![a, b]);
    assert_eq!(journal.append(vec![]).await.unwrap(), Vec::<u64>::new());
}

#[tokio::test]
async fn journal_seq_continues_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let (a, b) = (SessionId::new(), SessionId::new());
    {
        let journal = Journal::open(&path).unwrap();
        for i in 0..5 {
            let session = if i % 2 == 0 { a } else { b };
            assert_eq!(
                journal.append(vec![stopped(session, "x")]).await.unwrap(),
                vec![i + 1]
            );
        }
    }
    let journal = Journal::open(&path).unwrap();
    assert_eq!(
        journal.append(vec![stopped(b, "y")]).await.unwrap(),
        vec![6]
    );
    let seqs: Vec<u64> = journal
        .read(a, 0, None)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(seqs, vec![1, 3, 5]);
    assert_eq!(journal.last_seq(b).unwrap(), Some(6));
}

#[tokio::test]
async fn journal_non_durable_mode_persists_on_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let session = SessionId::new();
    {
        let journal = Journal::open_with(&path, fast()).unwrap();
        journal.append(vec![stopped(session, "x")]).await.unwrap();
    }
    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.last_seq(session).unwrap(), Some(1));
}

#[tokio::test]
async fn journal_append_is_idempotent_by_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), fast()).unwrap();
    let session = SessionId::new();
    let first = stopped(session, "first");
    let second = stopped(session, "second");
    assert_eq!(journal.append(vec![first.clone()]).await.unwrap(), vec![1]);

    // The same id again, even with other content, is answered with the old seq.
    let mut changed = first.clone();
    changed.kind = EventKind::SessionStopped {
        reason: "changed".into(),
    };
    assert_eq!(journal.append(vec![changed]).await.unwrap(), vec![1]);

    // A duplicate inside one group.
    assert_eq!(
        journal
            .append(vec![second.clone(), first.clone(), second.clone()])
            .await
            .unwrap(),
        vec![2, 1, 2]
    );
    assert_eq!(
        journal.read(session, 0, None).unwrap(),
        vec![(1, first.clone()), (2, second.clone())]
    );
    assert_eq!(journal.seq_of(second.id()).unwrap(), Some(2));
    let stats = journal.stats();
    assert_eq!((stats.events, stats.duplicates), (2, 3));
    // The next new event continues right after, with no seq burnt by the duplicates.
    assert_eq!(
        journal
            .append(vec![stopped(session, "third")])
            .await
            .unwrap(),
        vec![3]
    );
}

#[tokio::test]
async fn journal_duplicates_across_concurrent_groups_share_one_seq() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), fast()).unwrap();
    let event = stopped(SessionId::new(), "same");
    let appends = (0..20).map(|_| journal.append(vec![event.clone()]));
    let seqs = futures::future::join_all(appends).await;
    assert!(seqs.iter().all(|s| s.as_ref().unwrap() == &vec![1]));
    assert_eq!(journal.stats().events, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_concurrent_appends_are_batched() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("j.redb")).unwrap();
    let sessions: Vec<SessionId> = (0..8).map(|_| SessionId::new()).collect();
    let mut tasks = Vec::new();
    for t in 0..40 {
        let journal = journal.clone();
        let session = sessions[t % sessions.len()];
        tasks.push(tokio::spawn(async move {
            let groups = (0..5).map(|i| {
                let events = (0..=i % 3).map(|_| stopped(session, "x")).collect();
                journal.append(events)
            });
            futures::future::join_all(groups).await
        }));
    }
    let mut all = Vec::new();
    let mut appends = 0u64;
    for task in tasks {
        for group in task.await.unwrap() {
            let seqs = group.unwrap();
            // A group's events are consecutive: one group, one transaction.
            assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
            all.extend(seqs);
            appends += 1;
        }
    }
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "every event got its own seq");
    assert_eq!(distinct.first(), Some(&1));
    assert_eq!(distinct.last(), Some(&(all.len() as u64)));
    let stats = journal.stats();
    assert_eq!(stats.appends, appends);
    assert_eq!(stats.events, all.len() as u64);
    assert!(
        stats.batches < appends,
        "no batching happened: {stats:?} for {appends} appends"
    );
    for session in sessions {
        let seqs: Vec<u64> = journal
            .read(session, 0, None)
            .unwrap()
            .iter()
            .map(|(s, _)| *s)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(seqs.len(), 5 * (1 + 2 + 3 + 1 + 2));
    }
}

#[tokio::test]
async fn journal_corrupt_value_is_reported_with_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let session = SessionId::new();
    {
        let journal = Journal::open(&path).unwrap();
        journal
            .append(vec![stopped(session, "ok"), stopped(session, "soon bad")])
            .await
            .unwrap();
    }
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(EVENTS)
            .unwrap()
            .insert(2, [7u8, 1, 2].as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.read(session, 1, Some(1)).unwrap().len(), 1);
    let error = journal.read(session, 1, None).unwrap_err();
    assert!(
        matches!(&error, ReadError::Corrupt { seq: 2, detail } if detail.contains("format byte 7")),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "journal entry seq 2 is corrupt: unknown format byte 7; this build reads format 1 (JSON)"
    );
}

#[tokio::test]
async fn journal_second_open_of_one_file_in_a_process_shares_the_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let journal = Journal::open(&path).unwrap();
    // Another spelling of the same file meets the same handle.
    let again = Journal::open(dir.path().join(".").join("j.redb")).unwrap();
    let session = SessionId::new();
    let event = stopped(session, "x");
    assert_eq!(journal.append(vec![event.clone()]).await.unwrap(), vec![1]);
    assert_eq!(again.read(session, 1, None).unwrap(), vec![(1, event)]);
    drop(journal);
    drop(again);
    // Dropping the last handle releases the file at once.
    Journal::open(&path).unwrap();
}

#[tokio::test]
async fn journal_temporary_files_go_with_the_last_handle() {
    let journal = Journal::open_temporary().unwrap();
    let path = journal.path().to_path_buf();
    let session = SessionId::new();
    journal.append(vec![stopped(session, "x")]).await.unwrap();
    assert!(path.exists());
    drop(journal);
    assert!(!path.exists(), "{} left behind", path.display());
    assert!(!crate::journal::wal::path_for(&path).exists());
}

#[tokio::test]
async fn journal_import_is_refused_while_its_session_is_live_and_a_restore_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_with(dir.path().join("j.redb"), fast()).unwrap();
    let (live, other) = (SessionId::new(), SessionId::new());
    // What a starting or restored session holds while any handle of it lives.
    let claim = journal.claim(live).unwrap();
    let refused = journal
        .import(vec![stopped(other, "a"), stopped(live, "b")])
        .await;
    assert!(
        matches!(refused, Err(ImportError::Live { session }) if session == live),
        "{refused:?}"
    );
    // Nothing of the group went in, not even the other session's event.
    assert_eq!(journal.last_seq(other).unwrap(), None);
    assert_eq!(journal.last_seq(live).unwrap(), None);
    drop(claim);
    assert_eq!(
        journal
            .import(vec![started(live), stopped(live, "b")])
            .await
            .unwrap(),
        vec![1, 2]
    );

    // While an import holds its share, the session cannot be claimed (restore waits).
    let share = journal.inner.claims.claim_import(other).unwrap();
    let second = journal.inner.claims.claim_import(other).unwrap();
    assert!(matches!(journal.claim(other), Err(Claimed::Importing)));
    drop(share);
    assert!(matches!(journal.claim(other), Err(Claimed::Importing)));
    drop(second);
    assert!(journal.claim(other).is_ok());
}
