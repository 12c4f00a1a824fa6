//! The journal keeps its rules when written from outside: `Journal::import` refuses events
//! that break a session's shape (a forged turn, an orphan terminal, another session's
//! event), and a restore reports a journal that breaks it, tampered on disk, as corrupt.
//! A real session's journal, copied event by event into another file, imports whole.

use crate::common;

use treadle_event::{
    Event, EventKind, Header, LoopId, Message, Role, SessionId, StepId, TurnId, Usage,
};
use treadle_scripted::Reply;
use treadle_session::journal::ShapeError;
use treadle_session::{ImportError, Journal, RestoreError};

/// Runs one turn in each of two sessions journaled in `dir`'s `j.redb`, and stops both.
async fn two_sessions(dir: &tempfile::TempDir) -> (SessionId, SessionId) {
    let server = common::server([Reply::text("first"), Reply::text("second")]).await;
    let mut ids = Vec::new();
    for input in ["one", "two"] {
        let session = common::session(server.base_url(), dir)
            .start()
            .await
            .unwrap();
        assert!(session.turn(input).run().await.unwrap().is_done());
        ids.push(session.id());
        session.shutdown().await;
    }
    (ids[0], ids[1])
}

/// The journal, once the stopped sessions have released it.
async fn reopen(path: &std::path::Path) -> Journal {
    for _ in 0..250 {
        if let Ok(journal) = Journal::open(path) {
            return journal;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Journal::open(path).expect("the journal, released")
}

fn loop_of(journal: &Journal, session: SessionId) -> LoopId {
    journal
        .read(session, 0, None)
        .unwrap()
        .iter()
        .find_map(|(_, e)| e.header.loop_id)
        .expect("a loop")
}

fn turn_done(header: Header) -> Event {
    Event::new(
        header,
        EventKind::TurnDone {
            text: "forged".into(),
            steps: 1,
            usage: Usage::default(),
        },
    )
}

fn refused_with(result: Result<Vec<u64>, ImportError>, index: usize) -> ShapeError {
    match result {
        Err(ImportError::Invalid {
            index: at, error, ..
        }) if at == index => error,
        other => panic!("not refused at {index}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_refuses_a_forged_turn_an_orphan_turn_done_and_another_sessions_event() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_sessions(&dir).await;
    let journal = reopen(&dir.path().join("j.redb")).await;
    let before = journal.read(a, 0, None).unwrap();
    let main = loop_of(&journal, a);

    // A whole turn written into the stopped session: no restore let it run again.
    let turn = TurnId::new();
    let in_turn = || Header::in_loop(a, main).with_turn(turn);
    let forged = vec![
        Event::new(
            in_turn(),
            EventKind::TurnStarted {
                input: treadle_event::InputId::new(),
                message: Message::user("forged question"),
            },
        ),
        Event::new(
            in_turn().with_step(StepId::new()),
            EventKind::StepDone {
                index: 0,
                messages: vec![Message::text(Role::Assistant, "forged answer")].into(),
                usage: Usage::default(),
                model: "scripted".into(),
            },
        ),
        turn_done(in_turn()),
    ];
    let error = refused_with(journal.import(forged).await, 0);
    assert_eq!(error, ShapeError::Stopped);

    // A terminal of a turn that never started.
    let orphan = turn_done(Header::in_loop(a, main).with_turn(TurnId::new()));
    let error = refused_with(journal.import(vec![orphan]).await, 0);
    assert!(
        matches!(
            error,
            ShapeError::TurnNotOpen {
                kind: "turn_done",
                ..
            }
        ),
        "{error:?}"
    );

    // Session b's step, written under session a's id: its turn is not a's.
    let (_, step) = journal
        .read(b, 0, None)
        .unwrap()
        .into_iter()
        .find(|(_, e)| matches!(e.kind, EventKind::StepDone { .. }))
        .expect("b's step");
    let mut header = step.header.clone();
    header.session = a;
    header.id = treadle_event::EventId::new();
    let foreign = Event::new(header, step.kind.clone());
    let error = refused_with(journal.import(vec![foreign]).await, 0);
    assert!(
        matches!(
            error,
            ShapeError::TurnNotOpen {
                kind: "step_done",
                ..
            }
        ),
        "{error:?}"
    );

    // A session whose first event is not its start.
    let stray = turn_done(Header::in_loop(SessionId::new(), main).with_turn(turn));
    let error = refused_with(journal.import(vec![stray]).await, 0);
    assert_eq!(error, ShapeError::NotStarted { kind: "turn_done" });

    // Nothing was written, and the history has no forged text.
    assert_eq!(journal.read(a, 0, None).unwrap(), before);
    drop(journal);
    let server = common::server([]).await;
    let restored = common::session(server.base_url(), &dir)
        .restore(a)
        .await
        .unwrap();
    let history = restored.history().await.unwrap();
    assert!(
        history.iter().all(|m| !m.text_content().contains("forged")),
        "{history:?}"
    );
    restored.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_journal_copied_into_another_file_imports_whole_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = two_sessions(&dir).await;
    let source = reopen(&dir.path().join("j.redb")).await;
    let events: Vec<Event> = source
        .read(a, 0, None)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    drop(source);
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = Journal::open(copy_dir.path().join("j.redb")).unwrap();
    // In two parts, the second checked after what the first wrote.
    let (first, second) = events.split_at(events.len() / 2);
    copy.import(first.to_vec()).await.expect("first part");
    copy.import(second.to_vec()).await.expect("second part");
    // Again: idempotent, nothing new.
    let again = copy.import(events.clone()).await.expect("again");
    assert_eq!(again.len(), events.len());
    drop(copy);
    let server = common::server([]).await;
    let restored = common::session(server.base_url(), &copy_dir)
        .restore(a)
        .await
        .expect("the copy restores");
    assert_eq!(restored.history().await.unwrap().len(), 2);
    restored.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_of_a_journal_tampered_on_disk_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = two_sessions(&dir).await;
    let path = dir.path().join("j.redb");
    let journal = reopen(&path).await;
    let events = journal.read(a, 0, None).unwrap();
    let (seq, started) = events
        .iter()
        .find(|(_, e)| matches!(e.kind, EventKind::TurnStarted { .. }))
        .cloned()
        .expect("a's turn");
    drop(journal);
    // The turn's start becomes the end of a turn that never started, written straight into
    // the redb file (the journal's format: a format byte, then JSON), as a tool editing the
    // file by hand would.
    let orphan = turn_done(
        Header::in_loop(a, started.header.loop_id.expect("loop")).with_turn(TurnId::new()),
    );
    let mut bytes = vec![1u8];
    bytes.extend(serde_json::to_vec(&orphan).unwrap());
    // The journal's handle is released by its writer thread after the drop, as in `reopen`.
    let db = {
        let mut tries = 0;
        loop {
            match redb::Database::create(&path) {
                Err(redb::DatabaseError::DatabaseAlreadyOpen) if tries < 250 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => break other.expect("the journal's file, released"),
            }
        }
    };
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events.v1");
    let tx = db.begin_write().unwrap();
    tx.open_table(table)
        .unwrap()
        .insert(seq, bytes.as_slice())
        .unwrap();
    tx.commit().unwrap();
    drop(db);

    let server = common::server([]).await;
    let restored = common::session(server.base_url(), &dir).restore(a).await;
    match restored {
        Err(RestoreError::Corrupt { seq: at, detail }) => {
            assert_eq!(at, seq, "reported where it was tampered");
            assert!(detail.contains("not open"), "{detail}");
        }
        Err(other) => panic!("not Corrupt: {other}"),
        Ok(_) => panic!("a tampered journal restored"),
    }
}
