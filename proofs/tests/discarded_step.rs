//! Rule 4, discarded-step: a step that fails or is interrupted in flight has no `StepDone`;
//! its turn ends in exactly one terminal, and the steps committed before it stay committed.
//!
//! Three ways to lose a step are proved: the stream is cut mid-answer, the server answers
//! 500 beyond the retries, and the turn is interrupted while the model is streaming.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use treadle_event::{Delivery, EventFilter, EventKind, StepId};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ToolCall};
use treadle_session::RetryPolicy;

fn committed_tool_steps(n: usize) -> Vec<Reply> {
    (0..n)
        .map(|i| {
            Reply::text(format!("step {i} "))
                .with_tool_calls([ToolCall::new("echo", json!({ "i": i }))])
        })
        .collect()
}

/// Checks rule 4 on one turn's deliveries; returns the terminal's kind name.
fn check_discarded(seed: u64, deliveries: &[Delivery], committed: usize) -> &'static str {
    let terminals: Vec<_> = deliveries
        .iter()
        .filter(|d| d.event.kind.terminal().is_some())
        .collect();
    assert_eq!(
        terminals.len(),
        1,
        "seed {seed}: exactly one terminal: {:?}",
        names(deliveries)
    );
    let done_steps: HashSet<StepId> = deliveries
        .iter()
        .filter(|d| matches!(d.event.kind, EventKind::StepDone { .. }))
        .filter_map(|d| d.event.header.step)
        .collect();
    assert_eq!(
        done_steps.len(),
        committed,
        "seed {seed}: committed steps stay committed"
    );
    let streamed_steps: HashSet<StepId> = deliveries
        .iter()
        .filter(|d| matches!(d.event.kind, EventKind::TokenDelta { .. }))
        .filter_map(|d| d.event.header.step)
        .collect();
    for step in &streamed_steps - &done_steps {
        assert!(
            !deliveries
                .iter()
                .any(|d| d.event.header.step == Some(step) && d.event.is_enduring()),
            "seed {seed}: the discarded step left an enduring trace"
        );
    }
    terminals[0].event.kind.name()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_answer_discards_the_step_and_fails_the_turn() {
    for seed in 0..SCHEDULES {
        let committed = (seed % 3) as usize;
        let mut replies = committed_tool_steps(committed);
        replies.push(
            Reply::text("this answer will never finish because the stream is cut").cut_after(3),
        );
        replies.push(Reply::text("fine again"));
        let world = World::start(Script::new(replies), seed, Duration::from_micros(300)).await;
        let session = world.session().start().await.expect("start");
        let mut sub = session.subscribe(EventFilter::all());
        session.turn("go").submit().await.expect("submit");
        let deliveries = until_terminal(&mut sub).await;
        assert_eq!(check_discarded(seed, &deliveries, committed), "turn_failed");
        let Some(EventKind::TurnFailed { error, steps, .. }) =
            deliveries.last().map(|d| &d.event.kind)
        else {
            unreachable!()
        };
        assert!(
            error.contains(world.server.base_url()) && error.contains("ended before"),
            "seed {seed}: {error}"
        );
        assert_eq!(*steps as usize, committed);
        let history = session.history().await.expect("history");
        assert_eq!(
            history.len(),
            1 + 2 * committed,
            "seed {seed}: only committed steps are in the history"
        );
        assert_eq!(
            history,
            history_from_journal(session.journal(), session.id())
        );

        // The session is still usable.
        let report = session.turn("again").run().await.expect("run");
        assert_eq!(report.answer().ok(), Some("fine again"));
        session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_beyond_the_retries_fails_the_turn_naming_the_status() {
    for seed in 0..SCHEDULES {
        let committed = (seed % 2) as usize;
        let mut replies = committed_tool_steps(committed);
        for _ in 0..3 {
            replies.push(Reply::status(500).body("the model server is overloaded"));
        }
        replies.push(Reply::text("recovered"));
        let world = World::start(Script::new(replies), seed, Duration::from_micros(200)).await;
        let session = world
            .session()
            .retry(RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(5),
            })
            .start()
            .await
            .expect("start");
        let mut sub = session.subscribe(EventFilter::all());
        session.turn("go").submit().await.expect("submit");
        let deliveries = until_terminal(&mut sub).await;
        assert_eq!(check_discarded(seed, &deliveries, committed), "turn_failed");
        let Some(EventKind::TurnFailed { error, .. }) = deliveries.last().map(|d| &d.event.kind)
        else {
            unreachable!()
        };
        assert!(
            error.contains("500"),
            "seed {seed}: the error names the status: {error}"
        );
        assert_eq!(
            world.server.request_count(),
            committed + 3,
            "seed {seed}: one try and two retries"
        );
        let report = session.turn("again").run().await.expect("run");
        assert_eq!(report.answer().ok(), Some("recovered"));
        session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_stream_ends_the_turn_and_keeps_committed_steps() {
    for seed in 0..SCHEDULES {
        let committed = (seed % 3) as usize;
        let mut replies = committed_tool_steps(committed);
        replies.push(Reply::text("streaming until someone interrupts me").block_after(2));
        let world = World::start(Script::new(replies), seed, Duration::from_micros(300)).await;
        let session = world.session().start().await.expect("start");
        let mut sub = session.subscribe(EventFilter::all());
        session.turn("go").submit().await.expect("submit");
        // Wait for the blocked step to start streaming, then interrupt.
        assert!(
            world.server.wait_requests(committed + 1, PATIENCE).await,
            "seed {seed}"
        );
        tokio::time::sleep(Duration::from_millis(pick(&mut rng(seed), 0..5))).await;
        assert!(
            session.interrupt().await.expect("interrupt"),
            "seed {seed}: a turn was running"
        );
        let deliveries = until_terminal(&mut sub).await;
        assert_eq!(
            check_discarded(seed, &deliveries, committed),
            "turn_interrupted"
        );
        assert!(
            world.server.wait_client_gone(PATIENCE).await,
            "seed {seed}: the model stream was dropped"
        );
        let history = session.history().await.expect("history");
        assert_eq!(history.len(), 1 + 2 * committed, "seed {seed}");
        assert_eq!(
            history,
            history_from_journal(session.journal(), session.id())
        );
        session.shutdown().await;
    }
}
