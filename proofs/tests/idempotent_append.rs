//! Rule 10, idempotent-append: appending an event whose id is already in the journal
//! changes nothing — alone, inside a group with new events, or raced by concurrent writers.
//! The journal's one public write, `Journal::import`, goes through the same append as a
//! session's commits, so it is what these tests drive.

use std::time::Duration;

use rand::Rng;
use treadle_event::{Event, EventKind, Header, InputId, LoopId, Message, SessionId, TurnId, Usage};
use treadle_proofs::*;
use treadle_session::Journal;

/// A session's start and the start of its turn `turn`: an import keeps a session's shape,
/// so steps go inside a started turn of a started session.
fn opening(session: SessionId, loop_id: LoopId, turn: TurnId) -> Vec<Event> {
    let started = EventKind::SessionStarted {
        model: "m".into(),
        endpoint: "e".into(),
        system: None,
        parent: None,
        fork: None,
    };
    let turn_started = EventKind::TurnStarted {
        input: InputId::new(),
        message: Message::user("go"),
    };
    vec![
        Event::new(Header::in_loop(session, loop_id), started),
        Event::new(
            Header::in_loop(session, loop_id).with_turn(turn),
            turn_started,
        ),
    ]
}

fn step_done(session: SessionId, loop_id: LoopId, turn: TurnId, index: u32) -> Event {
    Event::new(
        Header::in_loop(session, loop_id).with_turn(turn),
        EventKind::StepDone {
            index,
            messages: vec![Message::user(format!("message {index}"))].into(),
            usage: Usage::default(),
            model: "m".into(),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_id_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = Journal::open(dir.path().join("j.redb")).expect("open");
    let (session, loop_id, turn) = (SessionId::new(), LoopId::new(), TurnId::new());
    let opened = opening(session, loop_id, turn);
    journal.import(opened.clone()).await.expect("opening");
    let first: Vec<Event> = (0..3)
        .map(|i| step_done(session, loop_id, turn, i))
        .collect();
    let seqs = journal.import(first.clone()).await.expect("append");
    let before = journal.read(session, 0, None).expect("read");

    // The same events again: same seqs back, nothing new stored.
    assert_eq!(journal.import(first.clone()).await.expect("again"), seqs);
    // A group mixing an old id with a new one stores only the new one.
    let fresh = step_done(session, loop_id, turn, 9);
    let mixed = journal
        .import(vec![first[1].clone(), fresh.clone()])
        .await
        .expect("mixed");
    assert_eq!(mixed[0], seqs[1]);
    assert!(mixed[1] > seqs[2]);
    // A duplicate inside one group is stored once.
    let twice = step_done(session, loop_id, turn, 10);
    let inner = journal
        .import(vec![twice.clone(), twice.clone()])
        .await
        .expect("inner dup");
    assert_eq!(inner[0], inner[1]);

    let after = journal.read(session, 0, None).expect("read");
    assert_eq!(&after[..5], &before[..], "existing entries are untouched");
    assert_eq!(after.len(), opened.len() + 5);
    // A re-append with changed content under the same id is ignored, not an overwrite.
    let mut altered = first[0].clone();
    altered.kind = EventKind::SessionStopped {
        reason: "rewritten".into(),
    };
    journal.import(vec![altered]).await.expect("altered");
    assert_eq!(
        journal.read(session, seqs[0], Some(1)).expect("read")[0].1,
        first[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicate_appends_store_each_id_once() {
    for seed in 0..SCHEDULES {
        let dir = tempfile::tempdir().expect("dir");
        let journal = Journal::open(dir.path().join("j.redb")).expect("open");
        let (session, loop_id, turn) = (SessionId::new(), LoopId::new(), TurnId::new());
        let opened = opening(session, loop_id, turn);
        journal.import(opened.clone()).await.expect("opening");
        let events: Vec<Event> = (0..20)
            .map(|i| step_done(session, loop_id, turn, i))
            .collect();
        let mut tasks = Vec::new();
        for writer in 0..4u64 {
            let journal = journal.clone();
            let events = events.clone();
            let mut rng = rng(seed * 31 + writer);
            tasks.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for event in events {
                    if rng.random_bool(0.3) {
                        tokio::time::sleep(Duration::from_micros(rng.random_range(0..300))).await;
                    }
                    let id = event.id();
                    let seq = journal.import(vec![event]).await.expect("append")[0];
                    seqs.push((id, seq));
                }
                seqs
            }));
        }
        let mut per_writer = Vec::new();
        for task in tasks {
            per_writer.push(task.await.expect("task"));
        }
        // Every writer got the same seq for the same id.
        for other in &per_writer[1..] {
            assert_eq!(other, &per_writer[0], "seed {seed}");
        }
        let stored = journal.read(session, 0, None).expect("read");
        assert_eq!(
            stored.len(),
            opened.len() + events.len(),
            "seed {seed}: each id stored once"
        );
        let mut ids: Vec<_> = stored.iter().map(|(_, e)| e.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), opened.len() + events.len(), "seed {seed}");
    }
}
