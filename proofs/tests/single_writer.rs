//! Rule 1, single-writer: only the loop actor appends to committed history.
//!
//! While several queued turns run (tool steps with random delays), a poller reads the
//! history over and over. Every snapshot must be a prefix of the final history made of
//! whole committed groups (a turn's input, or a step's messages), snapshots never shrink
//! or change, and the final history is exactly what the journal committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use treadle_event::{EventFilter, EventKind};
use treadle_proofs::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_changes_only_by_journaled_commits_of_the_actor() {
    for seed in 0..SCHEDULES {
        let turns = 1 + (seed % 3) as usize;
        let (script, steps) = tool_turns(seed, turns);
        let world = World::start(script, seed, Duration::from_micros(400)).await;
        let session = world.session().start().await.expect("start");
        let mut sub = session.subscribe(EventFilter::enduring_only());

        let done = Arc::new(AtomicBool::new(false));
        let poller = {
            let session = session.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let mut snapshots = Vec::new();
                while !done.load(Ordering::Acquire) {
                    snapshots.push(session.history().await.expect("history"));
                    tokio::task::yield_now().await;
                }
                snapshots
            })
        };
        for t in 0..turns {
            session
                .turn(format!("question {t}"))
                .submit()
                .await
                .expect("submit");
        }
        let mut group_ends = vec![0usize];
        for _ in 0..turns {
            for delivery in until_terminal(&mut sub).await {
                let added = committed_messages(&delivery.event).len();
                if added > 0 {
                    group_ends.push(group_ends.last().copied().unwrap_or(0) + added);
                }
                if let EventKind::TurnFailed { error, .. } = &delivery.event.kind {
                    panic!("seed {seed}: turn failed: {error}");
                }
            }
        }
        done.store(true, Ordering::Release);
        let snapshots = poller.await.expect("poller");
        let final_history = session.history().await.expect("history");

        let journaled = history_from_journal(session.journal(), session.id());
        assert_eq!(
            final_history, journaled,
            "seed {seed}: history differs from the journal"
        );
        let expected_len: usize = steps.iter().map(|s| 1 + s * 2 - 1).sum();
        assert_eq!(final_history.len(), expected_len, "seed {seed}");

        let mut last_len = 0;
        for snapshot in &snapshots {
            assert!(snapshot.len() >= last_len, "seed {seed}: history shrank");
            assert!(
                group_ends.contains(&snapshot.len()),
                "seed {seed}: a snapshot of {} messages splits a committed group (group ends {group_ends:?})",
                snapshot.len()
            );
            assert_eq!(
                snapshot[..],
                final_history[..snapshot.len()],
                "seed {seed}: history was rewritten"
            );
            last_len = snapshot.len();
        }
        session.shutdown().await;
    }
}
