//! Tests of the hub: filters, slow subscribers, loss, catch-up under concurrency, close.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use treadle_event::{
    DeltaKind, Event, EventFilter, EventKind, Header, InputId, LoopId, LoopScope, SessionId,
};

use super::*;
use crate::journal::{Journal, JournalOptions};

fn journal(dir: &tempfile::TempDir) -> Journal {
    let options = JournalOptions {
        durable: false,
        ..Default::default()
    };
    Journal::open_with(dir.path().join("j.redb"), options).unwrap()
}

fn delta(session: SessionId, loop_id: LoopId, text: &str) -> Arc<Event> {
    Arc::new(Event::new(
        Header::in_loop(session, loop_id),
        EventKind::TokenDelta {
            kind: DeltaKind::Text,
            index: None,
            text: text.into(),
        },
    ))
}

fn cancelled(session: SessionId, loop_id: LoopId, reason: &str) -> Event {
    Event::new(
        Header::in_loop(session, loop_id),
        EventKind::InputCancelled {
            input: InputId::new(),
            reason: reason.into(),
        },
    )
}

fn stopped(session: SessionId) -> Event {
    Event::new(
        Header::session(session),
        EventKind::SessionStopped {
            reason: "bye".into(),
        },
    )
}

/// Journals `event` and publishes it, as the loop actor does.
async fn commit(hub: &Hub, journal: &Journal, event: Event) -> u64 {
    let seq = journal.append(vec![event.clone()]).await.unwrap()[0];
    hub.publish(Arc::new(event), Some(seq));
    seq
}

/// Everything the subscription yields until it ends.
async fn drain(sub: Subscription) -> Vec<Result<Delivery, SubscriptionLost>> {
    sub.collect().await
}

#[tokio::test]
async fn hub_respects_filters_per_class() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let session = SessionId::new();
    let hub = Hub::new(session, journal.clone());
    let (main, sub_agent) = (LoopId::new(), LoopId::new());
    let all = hub.subscribe(EventFilter::all());
    let main_only = hub.subscribe(EventFilter {
        ephemeral: LoopScope::Only(vec![main]),
        enduring: LoopScope::None,
    });

    hub.publish(delta(session, main, "m"), None);
    hub.publish(delta(session, sub_agent, "s"), None);
    commit(&hub, &journal, cancelled(session, main, "c")).await;
    commit(&hub, &journal, stopped(session)).await;
    hub.close();

    let kinds = |v: Vec<Result<Delivery, SubscriptionLost>>| -> Vec<(&'static str, Option<u64>)> {
        v.into_iter()
            .map(|d| d.unwrap())
            .map(|d| (d.event.kind.name(), d.journal_seq))
            .collect()
    };
    assert_eq!(
        kinds(drain(all).await),
        vec![
            ("token_delta", None),
            ("token_delta", None),
            ("input_cancelled", Some(1)),
            ("session_stopped", Some(2)),
        ]
    );
    // The main loop's delta, and the session-scoped event that always passes.
    assert_eq!(
        kinds(drain(main_only).await),
        vec![("token_delta", None), ("session_stopped", Some(2))]
    );
    let mut late = hub.subscribe(EventFilter::all());
    assert!(
        late.next().await.is_none(),
        "subscribing after close ends at once"
    );
}

#[tokio::test]
async fn hub_slow_subscriber_misses_ephemeral_but_keeps_enduring() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let session = SessionId::new();
    let hub = Hub::with_options(session, journal.clone(), HubOptions { queue_capacity: 4 });
    let main = LoopId::new();
    let mut slow = hub.subscribe(EventFilter::all());

    for i in 0..6 {
        hub.publish(delta(session, main, &i.to_string()), None);
    }
    assert_eq!(slow.missed(), 2);
    // Room for two more: an enduring event must get through, not be dropped.
    assert!(slow.next().await.unwrap().is_ok());
    assert!(slow.next().await.unwrap().is_ok());
    let seq = commit(&hub, &journal, cancelled(session, main, "kept")).await;
    hub.publish(delta(session, main, "fits"), None);
    hub.publish(delta(session, main, "dropped"), None);
    hub.close();

    let rest: Vec<Delivery> = drain(slow).await.into_iter().map(|d| d.unwrap()).collect();
    let texts: Vec<String> = rest
        .iter()
        .map(|d| match &d.event.kind {
            EventKind::TokenDelta { text, .. } => text.clone(),
            other => format!("{}@{:?}", other.name(), d.journal_seq),
        })
        .collect();
    assert_eq!(
        texts,
        vec!["2", "3", &format!("input_cancelled@Some({seq})"), "fits"]
    );
}

#[tokio::test]
async fn hub_enduring_overflow_closes_with_loss_after_queued() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let session = SessionId::new();
    let hub = Hub::with_options(session, journal.clone(), HubOptions { queue_capacity: 3 });
    let main = LoopId::new();
    let slow = hub.subscribe(EventFilter::enduring_only());
    let mut fast = hub.subscribe(EventFilter::enduring_only());

    let mut seqs = Vec::new();
    for i in 0..5 {
        seqs.push(commit(&hub, &journal, cancelled(session, main, &i.to_string())).await);
        // The fast subscriber keeps up and is never affected by the slow one.
        assert_eq!(
            fast.next().await.unwrap().unwrap().journal_seq,
            Some(seqs[i])
        );
    }
    assert_eq!(hub.subscriber_count(), 1);

    let got = drain(slow).await;
    assert_eq!(got.len(), 4);
    for (delivery, seq) in got[..3].iter().zip(&seqs) {
        assert_eq!(delivery.as_ref().unwrap().journal_seq, Some(*seq));
    }
    let lost = got[3].clone().unwrap_err();
    assert_eq!(
        lost,
        SubscriptionLost {
            resume_from: seqs[3]
        }
    );
    assert!(
        lost.to_string()
            .contains(&format!("subscribe_from({})", seqs[3]))
    );

    // Resuming where the error says loses nothing.
    let resumed = hub
        .subscribe_from(lost.resume_from, EventFilter::enduring_only())
        .unwrap()
        .into_subscription();
    hub.close();
    let resumed: Vec<u64> = drain(resumed)
        .await
        .into_iter()
        .map(|d| d.unwrap().journal_seq.unwrap())
        .collect();
    assert_eq!(resumed, seqs[3..].to_vec());
}

#[tokio::test]
async fn hub_close_ends_subscriptions_after_queued_events() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let session = SessionId::new();
    let hub = Hub::new(session, journal.clone());
    let mut sub = hub.subscribe(EventFilter::all());
    let waiting = tokio::spawn({
        let mut sub = hub.subscribe(EventFilter::all());
        async move { sub.next().await.is_none() }
    });
    hub.publish(delta(session, LoopId::new(), "x"), None);
    hub.close();
    hub.publish(delta(session, LoopId::new(), "ignored"), None);
    assert!(sub.next().await.unwrap().is_ok());
    assert!(sub.next().await.is_none());
    assert!(sub.next().await.is_none());
    assert!(
        !waiting.await.unwrap(),
        "the waiting subscriber got the queued event first"
    );
    assert!(hub.is_closed());

    // Dropping every hub handle ends subscriptions too.
    let hub = Hub::new(SessionId::new(), journal);
    let mut sub = hub.subscribe(EventFilter::all());
    drop(hub);
    assert!(sub.next().await.is_none());
}

#[tokio::test]
async fn hub_subscribe_from_replays_a_restored_journal_before_any_publish() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let session = SessionId::new();
    let main = LoopId::new();
    for i in 0..3 {
        journal
            .append(vec![cancelled(session, main, &i.to_string())])
            .await
            .unwrap();
    }
    journal
        .append(vec![stopped(SessionId::new())])
        .await
        .unwrap();
    let hub = Hub::new(session, journal.clone());
    assert_eq!(hub.last_published_seq(), Some(3));
    let sub = hub.subscribe_from(2, EventFilter::all()).unwrap();
    let beyond = hub.subscribe_from(10, EventFilter::all()).unwrap();
    let seq = commit(&hub, &journal, stopped(session)).await;
    hub.close();
    // Each seq, and 0 for the catch-up's mark (with the seq it covered through).
    let seqs = |v: Vec<Result<CatchUpItem, SubscriptionLost>>| -> Vec<(u64, Option<u64>)> {
        v.into_iter()
            .map(|item| match item.unwrap() {
                CatchUpItem::Event(d) => (d.journal_seq.unwrap(), None),
                CatchUpItem::CaughtUp { seq } => (0, Some(seq)),
            })
            .collect()
    };
    let got: Vec<_> = sub.collect().await;
    assert_eq!(
        seqs(got),
        vec![(2, None), (3, None), (0, Some(3)), (seq, None)]
    );
    let got: Vec<_> = beyond.collect().await;
    assert_eq!(seqs(got), vec![(0, Some(3)), (seq, None)]);
}

/// A publisher journals and publishes enduring events (with a delta before each) while a
/// subscriber joins at a random moment, with a small queue so that it sometimes falls
/// behind and must resume where the loss error says. Across resumptions it must see every
/// seq exactly once, in order, and never a delta after the enduring event that follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_subscribe_from_during_publishing_has_no_gap_and_no_duplicate() {
    const EVENTS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let journal = journal(&dir);
    let (mut mid_stream, mut resumed) = (0, 0);
    for round in 0..50 {
        let session = SessionId::new();
        let main = LoopId::new();
        let hub = Hub::with_options(session, journal.clone(), HubOptions { queue_capacity: 8 });
        let published = Arc::new(AtomicUsize::new(0));
        let publisher = tokio::spawn({
            let (hub, journal, published) = (hub.clone(), journal.clone(), published.clone());
            async move {
                for i in 0..EVENTS {
                    hub.publish(delta(session, main, &i.to_string()), None);
                    commit(&hub, &journal, cancelled(session, main, &i.to_string())).await;
                    published.fetch_add(1, Ordering::Relaxed);
                    // Another session's appends interleave, so seqs have holes.
                    if i % 7 == 0 {
                        journal
                            .append(vec![stopped(SessionId::new())])
                            .await
                            .unwrap();
                    }
                    for _ in 0..rand::random_range(0..3) {
                        tokio::task::yield_now().await;
                    }
                }
                hub.close();
            }
        });
        let join_after = rand::random_range(0..EVENTS);
        while published.load(Ordering::Relaxed) < join_after {
            tokio::task::yield_now().await;
        }
        if hub.last_published_seq().is_some() {
            mid_stream += 1;
        }

        let mut enduring = Vec::new();
        let mut seen_reasons = std::collections::HashSet::new();
        let mut from = 1;
        'resume: loop {
            let mut sub = hub.subscribe_from(from, EventFilter::all()).unwrap();
            // The catch-up's mark comes once: journaled seqs up to it before it, later
            // ones after it.
            let mut mark = None;
            while let Some(item) = sub.next().await {
                let delivery = match item {
                    Ok(CatchUpItem::Event(delivery)) => delivery,
                    Ok(CatchUpItem::CaughtUp { seq }) => {
                        assert_eq!(mark, None, "round {round}: a second mark");
                        assert!(enduring.last().is_none_or(|last| *last <= seq));
                        mark = Some(seq);
                        continue;
                    }
                    Err(lost) => {
                        resumed += 1;
                        from = lost.resume_from;
                        continue 'resume;
                    }
                };
                if let (Some(seq), None) = (delivery.journal_seq, mark) {
                    assert!(seq >= from, "round {round}");
                }
                if let (Some(seq), Some(mark)) = (delivery.journal_seq, mark) {
                    assert!(seq > mark, "round {round}: seq {seq} after the mark {mark}");
                }
                match &delivery.event.kind {
                    EventKind::TokenDelta { text, .. } => assert!(
                        !seen_reasons.contains(text),
                        "round {round}: delta {text} after its enduring event"
                    ),
                    EventKind::InputCancelled { reason, .. } => {
                        seen_reasons.insert(reason.clone());
                        enduring.push(delivery.journal_seq.unwrap());
                    }
                    other => panic!("unexpected {other:?}"),
                }
                // A slow reader now and then.
                if rand::random_range(0..8) == 0 {
                    tokio::task::yield_now().await;
                }
            }
            break;
        }
        publisher.await.unwrap();
        let expected: Vec<u64> = journal
            .read(session, 1, None)
            .unwrap()
            .into_iter()
            .map(|(seq, _)| seq)
            .collect();
        assert_eq!(expected.len(), EVENTS);
        assert_eq!(enduring, expected, "round {round}");
    }
    eprintln!("joined mid-stream in {mid_stream} of 50 rounds; resumed after loss {resumed} times");
}

/// The fan-out figure of docs/benchmarks.md ("fanout"): `TokenDelta`s published to 10
/// subscribers, paced on the slowest so that every one receives every delta. Ignored by
/// default (it is a measurement); run it in release:
/// `cargo test -p treadle-session --release --lib -- --ignored hub_fanout --nocapture`.
/// `TREADLE_FANOUT_DELTAS` sets the count (default 2,000,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints a figure"]
async fn hub_fanout_figure() {
    let total: usize = std::env::var("TREADLE_FANOUT_DELTAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let (subscribers, burst) = (10usize, 4096usize);
    let dir = tempfile::tempdir().unwrap();
    let session = SessionId::new();
    let options = HubOptions {
        queue_capacity: burst * 2,
    };
    let hub = Hub::with_options(session, journal(&dir), options);
    // One counter per subscriber: pacing on the slowest keeps every queue from overflowing,
    // so the figure is for deltas that every subscriber actually received.
    let counters: Vec<Arc<AtomicUsize>> = (0..subscribers).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for counter in &counters {
        let mut sub = hub.subscribe(EventFilter::all());
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(_)) = sub.next().await {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            counter.load(Ordering::Relaxed)
        }));
    }
    let slowest = || counters.iter().map(|c| c.load(Ordering::Relaxed)).min();
    let delta = delta(session, LoopId::new(), "tok");
    let started = std::time::Instant::now();
    let mut published = 0;
    while published < total {
        for _ in 0..burst {
            hub.publish_ephemeral(delta.clone()).unwrap();
        }
        published += burst;
        while slowest().unwrap_or(0) + burst < published {
            tokio::task::yield_now().await;
        }
    }
    while slowest().unwrap_or(0) < published {
        tokio::task::yield_now().await;
    }
    let wall = started.elapsed().as_secs_f64();
    hub.close();
    for task in tasks {
        assert_eq!(
            task.await.unwrap(),
            published,
            "every subscriber receives all"
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "fanout", "subscribers": subscribers, "deltas": published, "wall_s": wall,
            "deltas_per_s": published as f64 / wall,
            "deliveries_per_s": (published * subscribers) as f64 / wall,
        })
    );
}
