//! The resumable event stream of `treadle serve`, against the real binary: a client that
//! drops its connection at random points (seeded; the seed is printed, and
//! `TREADLE_SSE_SEED` replays one) and reconnects with `Last-Event-ID` reassembles exactly
//! the run's journal: every event once, in order, ids 1..=N with no gap. Token deltas of an
//! agent step arrive live.

use crate::common;

use common::Fixture;
use common::server::Server;
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use treadle::server::client::{SseEvent, SseParser};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// About 450 events over about 3 seconds: the drops land in catch-up and in live following.
const CHATTY: &str = "jobs:\n  - name: main\n    plan:\n      - task: count\n        run: for i in $(seq 1 200); do echo line $i; sleep 0.01; done\n      - in_parallel:\n          - task: a\n            run: for i in $(seq 1 100); do echo a $i; done\n          - task: b\n            run: for i in $(seq 1 100); do echo b $i; sleep 0.005; done\n";

async fn start_run(s: &Server, body: Value) -> u64 {
    let r = s
        .http()
        .post(s.url("/api/v1/runs"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.expect("json");
    v["id"].as_u64().expect("id")
}

/// Reads a run's whole stream in one connection, from after `after`.
async fn read_all(s: &Server, run: u64, after: u64) -> Vec<SseEvent> {
    let r = s
        .http()
        .get(s.url(&format!("/api/v1/runs/{run}/events")))
        .header("Last-Event-ID", after.to_string())
        .send()
        .await
        .expect("GET events");
    assert_eq!(r.status().as_u16(), 200);
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    let mut body = r.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("chunk");
        for e in parser.feed(&chunk) {
            if e.event == "end" {
                return out;
            }
            out.push(e);
        }
    }
    panic!("the stream closed without `end`");
}

#[tokio::test(flavor = "multi_thread")]
async fn dropped_connections_resume_with_no_gap_and_no_duplicate() {
    let seed: u64 = std::env::var("TREADLE_SSE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (TREADLE_SSE_SEED={seed} replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let f = Fixture::new(CHATTY);
    let s = Server::start(f.path(), &[], &[]);
    let run = start_run(&s, json!({"pipeline": "treadle"})).await;
    let client = s.http();
    let mut got: Vec<SseEvent> = Vec::new();
    let mut drops = 0;
    'connections: loop {
        let cursor = got.last().and_then(|e| e.id).unwrap_or(0);
        let r = client
            .get(s.url(&format!("/api/v1/runs/{run}/events")))
            .header("Last-Event-ID", cursor.to_string())
            .send()
            .await
            .expect("GET events");
        assert_eq!(r.status().as_u16(), 200);
        // Drop after a random number of bytes: mid-event as often as between events.
        let mut budget: usize = rng.random_range(1..600);
        let mut parser = SseParser::default();
        let mut body = r.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.expect("chunk");
            let take = chunk.len().min(budget);
            for e in parser.feed(&chunk[..take]) {
                if e.event == "end" {
                    break 'connections;
                }
                got.push(e);
            }
            budget -= take;
            if budget == 0 {
                drops += 1;
                continue 'connections;
            }
        }
        panic!("the stream closed without `end` (seed {seed})");
    }
    assert!(drops >= 50, "only {drops} drops (seed {seed})");
    let ids: Vec<u64> = got.iter().map(|e| e.id.expect("journaled id")).collect();
    let expected: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, expected, "gap or duplicate (seed {seed})");
    // The journal, read whole once the run has ended, is exactly what was reassembled.
    let journal = read_all(&s, run, 0).await;
    assert_eq!(
        got, journal,
        "reassembled stream differs from the journal (seed {seed})"
    );
    assert_eq!(
        journal.last().map(|e| e.event.as_str()),
        Some("run_finished")
    );
    let lines = journal.iter().filter(|e| e.event == "output").count();
    assert_eq!(lines, 400, "seed {seed}");
    // Resuming from the middle gives exactly the tail.
    let tail = read_all(&s, run, 100).await;
    assert_eq!(tail, journal[100..].to_vec());
    println!("{drops} drops, {} events", journal.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn token_deltas_stream_live_and_are_not_replayed() {
    let model = ScriptedServer::builder()
        .chunk_delay(std::time::Duration::from_millis(20))
        .start(Script::new([Reply::text(
            "The answer is forty-two, said slowly.",
        )]))
        .await
        .expect("scripted server");
    let yaml = "agents:\n  - name: talker\n    system: Answer.\njobs:\n  - name: main\n    plan:\n      - agent: talker\n        prompt: Say it.\n";
    let f = Fixture::new(yaml);
    let s = Server::start(f.path(), &[], &[("TREADLE_LOCAL_URL", model.base_url())]);
    let run = start_run(&s, json!({"pipeline": "treadle"})).await;
    let live = read_all(&s, run, 0).await;
    let tokens: Vec<&SseEvent> = live.iter().filter(|e| e.event == "token").collect();
    assert!(tokens.len() > 1, "no token deltas: {live:?}");
    let text: String = tokens
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(&e.data).expect("token json");
            assert_eq!(v["seq"], 0);
            assert!(e.id.is_none(), "a token delta has an id");
            v["text"].as_str().expect("text").to_owned()
        })
        .collect();
    assert!(text.contains("forty-two"), "{text}");
    // After the run: the journal alone, no tokens.
    let replay = read_all(&s, run, 0).await;
    assert!(replay.iter().all(|e| e.event != "token"));
    let journaled: Vec<&SseEvent> = live.iter().filter(|e| e.event != "token").collect();
    assert_eq!(journaled.len(), replay.len());
    assert!(
        replay
            .iter()
            .any(|e| e.event == "agent" && e.data.contains("forty-two"))
    );
}
