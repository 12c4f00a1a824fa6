//! Restoring from a damaged journal: a clear error, and nothing intact is lost or changed.

use crate::common;

use std::time::Duration;

use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{Journal, RestoreError, RetryPolicy};

async fn journal_with_one_turn(
    dir: &tempfile::TempDir,
) -> (ScriptedServer, treadle_event::SessionId) {
    let server = ScriptedServer::start(Script::new([
        Reply::text("first answer"),
        Reply::text("second answer"),
    ]))
    .await
    .unwrap();
    let session = common::session(server.base_url(), dir)
        .start()
        .await
        .unwrap();
    assert!(session.turn("one").run().await.unwrap().is_done());
    assert!(session.turn("two").run().await.unwrap().is_done());
    let id = session.id();
    session.shutdown().await;
    drop(session);
    // The actor drops its journal handle as it stops; wait until the file is free.
    for _ in 0..100 {
        if Journal::open(dir.path().join("j.redb")).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (server, id)
}

fn builder(server: &ScriptedServer, dir: &tempfile::TempDir) -> treadle_session::SessionBuilder {
    common::session(server.base_url(), dir).retry(RetryPolicy::none())
}

#[tokio::test]
async fn a_corrupt_entry_is_reported_by_seq_and_the_entries_before_it_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (server, id) = journal_with_one_turn(&dir).await;
    let bad_seq = {
        let path = dir.path().join("j.redb");
        let journal = Journal::open(&path).unwrap();
        let events = journal.read(id, 0, None).unwrap();
        let (seq, _) = events[events.len() / 2].clone();
        // Closed cleanly: everything is checkpointed into the redb file, the log is empty.
        drop(journal);
        // Damage one stored value directly with redb (the journal never hands its file
        // out), as a disk fault would.
        let db = redb::Database::create(&path).unwrap();
        let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events.v1");
        let tx = db.begin_write().unwrap();
        tx.open_table(table)
            .unwrap()
            .insert(seq, b"\x01{ this is not an event".as_slice())
            .unwrap();
        tx.commit().unwrap();
        seq
    };
    let error = builder(&server, &dir)
        .restore(id)
        .await
        .err()
        .expect("restore refuses");
    let message = error.to_string();
    assert!(
        matches!(error, RestoreError::Corrupt { seq, .. } if seq == bad_seq),
        "{message}"
    );
    assert!(
        message.contains(&bad_seq.to_string()) && message.contains("intact"),
        "{message}"
    );

    // Nothing was rewritten: everything before the damage reads back as it was.
    let journal = Journal::open(dir.path().join("j.redb")).unwrap();
    let intact = journal.read_range(id, ..bad_seq, None).unwrap();
    assert_eq!(intact.last().map(|(s, _)| *s), Some(bad_seq - 1));
}

#[tokio::test]
async fn a_truncated_journal_file_fails_clearly_and_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (server, id) = journal_with_one_turn(&dir).await;
    let path = dir.path().join("j.redb");
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 3).unwrap();
    drop(file);
    let before = std::fs::read(&path).unwrap();

    let error = builder(&server, &dir)
        .restore(id)
        .await
        .err()
        .expect("restore refuses");
    let message = error.to_string();
    assert!(
        message.contains("journal") || message.contains(&path.display().to_string()),
        "{message}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a failed restore does not touch the file"
    );
}
