//! Rule 1, single-writer, across handles: no sequence of public calls gives a session two
//! writers. Restoring a session that a handle in this process still runs is refused,
//! whether the restore names the journal's path or shares its handle; once every handle is
//! dropped (or the session is shut down) the restore waits for the old loops to end and
//! succeeds, and the journal never interleaves two incarnations' turns.

use std::time::Duration;

use serde_json::Value;
use treadle_event::{EventKind, SessionId};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script};
use treadle_session::{Journal, JournalView, RestoreError, Session};

fn answers() -> Script {
    Script::from_fn(|_: &Value| Reply::text("ok"))
}

/// One start or restore of the session, with the handles the test still holds.
struct Incarnation {
    handles: Vec<Session>,
    shut_down: bool,
}

impl Incarnation {
    fn live(&self) -> bool {
        !self.handles.is_empty() && !self.shut_down
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    RestoreByPath,
    RestoreSharingTheJournal,
    Clone,
    Drop,
    Shutdown,
    Run,
}

const OPS: [Op; 6] = [
    Op::RestoreByPath,
    Op::RestoreSharingTheJournal,
    Op::Clone,
    Op::Drop,
    Op::Shutdown,
    Op::Run,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issue_scenario_a_live_session_is_not_restored_by_path_or_by_shared_handle() {
    let world = World::start(answers(), 0, Duration::ZERO).await;
    let session = world.session().start().await.expect("start");
    assert!(session.turn("one").run().await.expect("run").is_done());
    let id = session.id();

    let by_path = world.session().restore(id).await.err();
    assert!(
        matches!(by_path, Some(RestoreError::Live { session }) if session == id),
        "{by_path:?}"
    );
    let shared = world
        .session()
        // The same file opened again is the same journal (the process opens a file once).
        .journal(Journal::open(session.journal().path()).expect("the same journal"))
        .restore(id)
        .await
        .err();
    let message = shared.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(
        matches!(shared, Some(RestoreError::Live { .. })),
        "{message}"
    );
    assert!(message.contains("is live in this process"), "{message}");

    // The original still works, alone.
    assert!(session.turn("two").run().await.expect("run").is_done());
    let history = session.history().await.expect("history");

    // Dropping the last handle stops the session; the restore then gets exactly its history.
    drop(session);
    let restored = tokio::time::timeout(PATIENCE, world.session().restore(id))
        .await
        .expect("restore waits only for the old loop to stop")
        .expect("restore after the drop");
    assert_eq!(restored.history().await.expect("history"), history);
    assert_no_interleaving(restored.journal(), id);
    restored.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sequence_of_public_calls_gives_a_session_two_writers() {
    for seed in 0..SCHEDULES {
        let world = World::start(answers(), seed, Duration::from_micros(200)).await;
        let first = world.session().start().await.expect("start");
        let id = first.id();
        let mut incarnations = vec![Incarnation {
            handles: vec![first],
            shut_down: false,
        }];
        let mut rng = rng(seed);
        for _ in 0..12 {
            let op = OPS[pick(&mut rng, 0..OPS.len() as u64) as usize];
            apply(op, &world, id, &mut incarnations, &mut rng, seed).await;
        }
        let journal = incarnations
            .iter()
            .flat_map(|i| i.handles.first())
            .map(|s| s.journal().clone())
            .next();
        for incarnation in &incarnations {
            for handle in &incarnation.handles {
                handle.shutdown().await;
            }
        }
        let journal = match journal {
            Some(journal) => journal,
            None => JournalView::clone(&Journal::open(world.journal_path()).expect("journal")),
        };
        assert_no_interleaving(&journal, id);
    }
}

/// A handle of some incarnation, chosen by the schedule: (incarnation, handle).
fn any_handle(
    incarnations: &[Incarnation],
    rng: &mut rand::rngs::StdRng,
) -> Option<(usize, usize)> {
    let all: Vec<(usize, usize)> = incarnations
        .iter()
        .enumerate()
        .flat_map(|(i, inc)| (0..inc.handles.len()).map(move |h| (i, h)))
        .collect();
    (!all.is_empty()).then(|| all[pick(rng, 0..all.len() as u64) as usize])
}

async fn apply(
    op: Op,
    world: &World,
    id: SessionId,
    incarnations: &mut Vec<Incarnation>,
    rng: &mut rand::rngs::StdRng,
    seed: u64,
) {
    let picked = any_handle(incarnations, rng);
    match op {
        Op::RestoreByPath | Op::RestoreSharingTheJournal => {
            let live = incarnations.iter().any(Incarnation::live);
            let mut builder = world.session();
            if let (Op::RestoreSharingTheJournal, Some((i, h))) = (op, picked) {
                let path = incarnations[i].handles[h].journal().path();
                builder = builder.journal(Journal::open(path).expect("the same journal"));
            }
            let result = tokio::time::timeout(PATIENCE, builder.restore(id))
                .await
                .unwrap_or_else(|_| panic!("seed {seed}: restore hung"));
            match result {
                Err(RestoreError::Live { .. }) if live => {}
                Ok(session) if !live => incarnations.push(Incarnation {
                    handles: vec![session],
                    shut_down: false,
                }),
                other => panic!(
                    "seed {seed}: {op:?} with a live incarnation: {live}, got {:?}",
                    other.map(|s| s.id())
                ),
            }
        }
        Op::Clone => {
            if let Some((i, h)) = picked {
                let clone = incarnations[i].handles[h].clone();
                incarnations[i].handles.push(clone);
            }
        }
        Op::Drop => {
            if let Some((i, h)) = picked {
                incarnations[i].handles.remove(h);
            }
        }
        Op::Shutdown => {
            if let Some((i, h)) = picked {
                incarnations[i].handles[h].shutdown().await;
                incarnations[i].shut_down = true;
            }
        }
        Op::Run => {
            if let Some((i, h)) = picked {
                let live = incarnations[i].live();
                let run =
                    tokio::time::timeout(PATIENCE, incarnations[i].handles[h].turn("hi").run())
                        .await
                        .unwrap_or_else(|_| panic!("seed {seed}: run hung"));
                match run {
                    Ok(report) if live => assert!(report.is_done(), "seed {seed}: {report:?}"),
                    Err(_) if !live => {}
                    other => panic!("seed {seed}: run on live={live} gave {other:?}"),
                }
            }
        }
    }
}

/// The main loop's turns in the journal: each `TurnStarted` is closed by its terminal
/// before the next one starts. Two writers of one history would interleave them.
fn assert_no_interleaving(journal: &JournalView, id: SessionId) {
    let events = journal.read(id, 0, None).expect("read");
    let started = events
        .iter()
        .filter(|(_, e)| matches!(e.kind, EventKind::SessionStarted { .. }))
        .count();
    assert_eq!(started, 1, "one SessionStarted");
    let mut open = None;
    for (seq, event) in &events {
        match &event.kind {
            EventKind::TurnStarted { .. } => {
                assert!(
                    open.is_none(),
                    "seq {seq}: a turn started while {open:?} ran"
                );
                open = event.header.turn;
            }
            kind if kind.terminal().is_some() => {
                assert_eq!(
                    open, event.header.turn,
                    "seq {seq}: a terminal of another turn"
                );
                open = None;
            }
            _ => {}
        }
    }
}
