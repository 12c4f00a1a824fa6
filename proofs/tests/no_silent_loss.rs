//! Rule 8, no-silent-loss: a subscriber that falls behind may lose ephemeral events only.
//! An enduring event that cannot be delivered closes the subscription with a loss error
//! that says where to resume from, and resuming there misses and repeats nothing.

use std::time::Duration;

use rand::Rng;
use treadle_event::{EventFilter, LoopScope};
use treadle_proofs::*;
use treadle_scripted::Script;

const CAPACITY: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_loses_only_deltas_or_gets_a_resumable_loss_error() {
    for seed in 0..SCHEDULES {
        let steps = 6 + (seed % 6) as usize;
        let world = World::start(Script::echo_until(steps), seed, Duration::from_micros(200)).await;
        let session = world
            .session()
            .subscriber_capacity(CAPACITY)
            .start()
            .await
            .expect("start");
        let mut slow = session.subscribe(EventFilter::all());
        let report = session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");

        // Read the backlog slowly; the queue overflowed long ago.
        let mut rng = rng(seed);
        let mut delivered = Vec::new();
        let lost = loop {
            if rng.random_bool(0.2) {
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..500))).await;
            }
            match tokio::time::timeout(PATIENCE, slow.next())
                .await
                .expect("in time")
            {
                Some(Ok(d)) => delivered.push(d),
                Some(Err(lost)) => break lost,
                None => panic!("seed {seed}: the stream ended without a loss error"),
            }
        };
        assert!(
            lost.to_string().contains(&lost.resume_from.to_string()),
            "seed {seed}: the error names where to resume: {lost}"
        );
        assert!(
            tokio::time::timeout(PATIENCE, slow.next())
                .await
                .expect("in time")
                .is_none(),
            "seed {seed}: closed after the loss"
        );

        let delivered_seqs: Vec<u64> = delivered.iter().filter_map(|d| d.journal_seq).collect();
        assert!(
            delivered_seqs.windows(2).all(|w| w[0] < w[1]),
            "seed {seed}: in order"
        );
        if let Some(last) = delivered_seqs.last() {
            assert!(
                lost.resume_from > *last,
                "seed {seed}: resume point is after what was delivered"
            );
        }

        // Resuming from the loss point yields every remaining enduring event exactly once.
        let mut resumed = session
            .subscribe_from(lost.resume_from, EventFilter::enduring_only())
            .expect("subscribe_from")
            .into_subscription();
        let rest = until_terminal(&mut resumed).await;
        let resumed_seqs: Vec<u64> = rest.iter().filter_map(|d| d.journal_seq).collect();
        assert_eq!(resumed_seqs.first(), Some(&lost.resume_from), "seed {seed}");

        let first = delivered_seqs.first().copied().unwrap_or(lost.resume_from);
        let journal: Vec<u64> = session
            .journal()
            .read(session.id(), first, None)
            .expect("read")
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        let mut seen = delivered_seqs.clone();
        seen.extend(&resumed_seqs);
        assert_eq!(seen, journal, "seed {seed}: no gap, no duplicate");
        session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflowing_with_ephemeral_events_drops_them_without_closing() {
    let world = World::start(Script::echo_until(8), 7, Duration::ZERO).await;
    let session = world
        .session()
        .subscriber_capacity(CAPACITY)
        .start()
        .await
        .expect("start");
    let mut deltas_only = session.subscribe(EventFilter {
        ephemeral: LoopScope::All,
        enduring: LoopScope::None,
    });
    let report = session.turn("go").run().await.expect("run");
    assert!(report.is_done());
    let mut got = 0;
    // The turn is over, so the queue holds all it will; drain until it stays quiet.
    while let Ok(next) = tokio::time::timeout(Duration::from_millis(200), deltas_only.next()).await
    {
        let delivery = next
            .expect("open")
            .expect("ephemeral overflow never closes a subscription with a loss");
        assert!(delivery.journal_seq.is_none());
        got += 1;
    }
    assert_eq!(
        got, CAPACITY,
        "the full queue kept the first deltas and dropped the rest"
    );
    session.shutdown().await;
}
