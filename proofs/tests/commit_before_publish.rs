//! Rule 2, commit-before-publish: `StepDone` reaches subscribers only after the journal
//! holds it durably, and its messages are in the history by then.

use std::time::Duration;

use treadle_event::{EventFilter, EventKind};
use treadle_proofs::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_done_is_journaled_and_committed_before_anyone_sees_it() {
    for seed in 0..SCHEDULES {
        let (script, steps) = tool_turns(seed, 1);
        let world = World::start(script, seed, Duration::from_micros(300)).await;
        let session = world.session().start().await.expect("start");
        let mut sub = session.subscribe(EventFilter::all());
        session.turn("go").submit().await.expect("submit");

        let mut seen = 0;
        loop {
            let deliveries = next_enduring(&mut sub).await;
            let Some(delivery) = deliveries else { break };
            let event = &delivery.event;
            let seq = delivery
                .journal_seq
                .expect("enduring events carry a journal seq");
            // The journal must already hold this exact event at this seq.
            let journaled = session
                .journal()
                .read(session.id(), seq, Some(1))
                .expect("read");
            assert_eq!(
                journaled.first().map(|(s, e)| (*s, e)),
                Some((seq, &**event)),
                "seed {seed}: published before journaled"
            );
            if let EventKind::StepDone { messages, .. } = &event.kind {
                seen += 1;
                let history = session.history().await.expect("history");
                assert!(
                    history.windows(messages.len()).any(|w| w == &messages[..]),
                    "seed {seed}: StepDone published but its messages are not in the history"
                );
            }
            if event.kind.terminal().is_some() {
                break;
            }
        }
        assert_eq!(seen, steps[0], "seed {seed}: every step was seen");
        session.shutdown().await;
    }
}

async fn next_enduring(sub: &mut treadle_session::Subscription) -> Option<treadle_event::Delivery> {
    loop {
        let next = tokio::time::timeout(PATIENCE, sub.next())
            .await
            .expect("an event in time")?;
        let delivery = next.expect("no loss");
        if delivery.event.is_enduring() {
            return Some(delivery);
        }
    }
}
