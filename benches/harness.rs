//! Harness benchmarks, printed as JSON lines (`cargo bench --bench harness`).
//!
//! * `turn_overhead`: one 200-step tool turn against the scripted server, three ways in one
//!   run: a raw async-openai loop with no harness (the floor), treadle with a journal that
//!   does not fsync, and treadle with the durable journal. Also one measured fsync.
//! * `concurrent_sessions`: 100 sessions × 20 steps at once: wall time and peak memory.
//! * `fanout`: TokenDelta events published to 10 subscribers, each receiving all.
//!
//! Pass a name to run one: `cargo bench --bench harness -- fanout`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_scripted::{Script, ScriptedServer};
use treadle_session::event::{DeltaKind, Event, EventFilter, EventKind, Header, LoopId, SessionId};
use treadle_session::hub::{Hub, HubOptions};
use treadle_session::{FnTool, Journal, JournalOptions, Session, ToolError};

fn turn_steps() -> usize {
    size(200)
}

#[derive(Deserialize, JsonSchema)]
struct Echo {
    i: Value,
}

fn echo() -> FnTool<
    Echo,
    impl Fn(Echo) -> std::future::Ready<Result<String, ToolError>> + Send + Sync + 'static,
> {
    FnTool::new("echo", "Returns its argument.", |a: Echo| {
        std::future::ready(Ok(a.i.to_string()))
    })
}

async fn server(steps: usize) -> ScriptedServer {
    ScriptedServer::builder()
        .record(false)
        .start(Script::echo_until(steps))
        .await
        .expect("scripted server")
}

/// The floor: the same loop written directly on async-openai, no events, no journal.
async fn raw_loop(endpoint: &str) -> usize {
    use async_openai::Client;
    use async_openai::config::OpenAIConfig;
    let client = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(endpoint)
            .with_api_key("none"),
    );
    let tools = json!([{ "type": "function", "function": { "name": "echo", "description": "Returns its argument.",
        "parameters": { "type": "object", "properties": { "i": {} }, "required": ["i"] } } }]);
    let mut messages = vec![json!({ "role": "user", "content": "go" })];
    let mut steps = 0;
    loop {
        let body = json!({ "model": "scripted", "messages": messages, "stream": true,
            "stream_options": { "include_usage": true }, "tools": tools });
        let mut stream = client
            .chat()
            .create_stream_byot::<Value, Value>(body)
            .await
            .expect("stream");
        let mut text = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("chunk");
            let Some(delta) = chunk["choices"].get(0).map(|c| &c["delta"]) else {
                continue;
            };
            if let Some(t) = delta["content"].as_str() {
                text.push_str(t);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().unwrap_or(0) as usize;
                if calls.len() <= index {
                    calls.resize(index + 1, Default::default());
                }
                if let Some(id) = call["id"].as_str() {
                    calls[index].0 = id.to_owned();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    calls[index].1.push_str(name);
                }
                if let Some(args) = call["function"]["arguments"].as_str() {
                    calls[index].2.push_str(args);
                }
            }
        }
        steps += 1;
        if calls.is_empty() {
            return steps;
        }
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({ "id": id, "type": "function",
            "function": { "name": name, "arguments": args } })
            })
            .collect();
        messages.push(json!({ "role": "assistant", "content": text, "tool_calls": tool_calls }));
        for (id, _, args) in &calls {
            let i: Value = serde_json::from_str::<Value>(args)
                .map(|v| v["i"].clone())
                .unwrap_or(Value::Null);
            messages.push(json!({ "role": "tool", "tool_call_id": id, "content": i.to_string() }));
        }
    }
}

async fn treadle_turn(endpoint: &str, journal: Journal) -> u32 {
    let session = Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal(journal)
        .max_steps(turn_steps() as u32 + 2)
        .tool(echo())
        .start()
        .await
        .expect("session");
    let report = session.run("go").await.expect("run");
    assert!(report.is_done(), "{report:?}");
    session.shutdown().await;
    report.steps
}

fn one_fsync_us(dir: &std::path::Path) -> f64 {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).expect("probe file");
    let mut samples = Vec::new();
    for _ in 0..20 {
        file.write_all(&[0u8; 512]).expect("write");
        let t = Instant::now();
        file.sync_data().expect("fsync");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median latency of one durable redb commit holding one small insert: the floor of what a
/// durable journal append on redb can cost on this disk.
fn redb_commit_us(dir: &std::path::Path) -> f64 {
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("probe");
    let db = redb::Database::create(dir.join("redb-probe.redb")).expect("redb");
    let mut samples = Vec::new();
    for i in 0..200u64 {
        let t = Instant::now();
        let tx = db.begin_write().expect("begin");
        {
            let mut t = tx.open_table(table).expect("table");
            t.insert(i, [7u8; 300].as_slice()).expect("insert");
        }
        tx.commit().expect("commit");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn turn_overhead() {
    let dir = tempfile::tempdir().expect("dir");
    let server = server(turn_steps()).await;
    let url = server.base_url().to_owned();
    // Warm up connections and code paths once.
    raw_loop(&url).await;
    let mut best = [f64::MAX; 3];
    for round in 0..3 {
        let t = Instant::now();
        let steps = raw_loop(&url).await;
        best[0] = best[0].min(t.elapsed().as_secs_f64() * 1e6 / steps as f64);

        let fast = Journal::open_with(
            dir.path().join(format!("fast{round}.redb")),
            JournalOptions {
                durable: false,
                ..JournalOptions::default()
            },
        )
        .expect("journal");
        let t = Instant::now();
        let steps = treadle_turn(&url, fast).await;
        best[1] = best[1].min(t.elapsed().as_secs_f64() * 1e6 / steps as f64);

        let durable =
            Journal::open(dir.path().join(format!("durable{round}.redb"))).expect("journal");
        let t = Instant::now();
        let steps = treadle_turn(&url, durable).await;
        best[2] = best[2].min(t.elapsed().as_secs_f64() * 1e6 / steps as f64);
    }
    let fsync = one_fsync_us(dir.path());
    let redb_commit = redb_commit_us(dir.path());
    println!(
        "{}",
        json!({
            "bench": "turn_overhead", "steps": turn_steps(),
            "floor_per_step_us": best[0], "treadle_nofsync_per_step_us": best[1], "treadle_durable_per_step_us": best[2],
            "nofsync_over_floor": best[1] / best[0],
            "one_fsync_us": fsync,
        "one_redb_durable_commit_us": redb_commit,
            "durable_extra_per_step_in_fsyncs": (best[2] - best[1]) / fsync,
        })
    );
}

async fn concurrent_sessions() {
    let (sessions, steps) = (size(100), size(20));
    let dir = tempfile::tempdir().expect("dir");
    let server = server(steps).await;
    let journal = Journal::open(dir.path().join("many.redb")).expect("journal");
    let mut all = Vec::new();
    for _ in 0..sessions {
        all.push(
            Session::builder()
                .endpoint(server.base_url())
                .model("scripted")
                .journal(journal.clone())
                .max_steps(steps as u32 + 2)
                .tool(echo())
                .start()
                .await
                .expect("session"),
        );
    }
    let t = Instant::now();
    let reports = futures::future::join_all(all.iter().map(|s| s.run("go"))).await;
    let wall = t.elapsed();
    for report in reports {
        let report = report.expect("run");
        assert!(
            report.is_done() && report.steps as usize == steps + 1,
            "{report:?}"
        );
    }
    let stats = journal.stats();
    println!(
        "{}",
        json!({
            "bench": "concurrent_sessions", "sessions": sessions, "steps": steps,
            "wall_s": wall.as_secs_f64(), "per_step_us": wall.as_secs_f64() * 1e6 / (sessions * (steps + 1)) as f64,
            "journal_batches": stats.batches, "journal_events": stats.events,
            "peak_rss_mb": peak_rss_mb(),
        })
    );
}

async fn fanout() {
    let (subscribers, total, burst) = (10usize, size(2_000_000), 4096usize);
    let dir = tempfile::tempdir().expect("dir");
    let journal = Journal::open(dir.path().join("fanout.redb")).expect("journal");
    let session = SessionId::new();
    let hub = Hub::with_options(
        session,
        journal,
        HubOptions {
            queue_capacity: burst * 2,
        },
    );
    // One counter per subscriber: pacing on the slowest keeps every queue from overflowing,
    // so the figure is for deltas that every subscriber actually received.
    let counters: Vec<Arc<AtomicUsize>> = (0..subscribers)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
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
    let slowest = || {
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    };
    let delta = Arc::new(Event::new(
        Header::in_loop(session, LoopId::new()),
        EventKind::TokenDelta {
            kind: DeltaKind::Text,
            index: None,
            text: "tok".into(),
        },
    ));
    let t = Instant::now();
    let mut published = 0;
    while published < total {
        for _ in 0..burst {
            hub.publish(delta.clone(), None);
        }
        published += burst;
        while slowest() + burst < published {
            tokio::task::yield_now().await;
        }
    }
    while slowest() < published {
        tokio::task::yield_now().await;
    }
    let wall = t.elapsed();
    hub.close();
    for task in tasks {
        assert_eq!(
            task.await.expect("subscriber"),
            published,
            "every subscriber receives all"
        );
    }
    println!(
        "{}",
        json!({
            "bench": "fanout", "subscribers": subscribers, "deltas": published,
            "wall_s": wall.as_secs_f64(), "deltas_per_s": published as f64 / wall.as_secs_f64(),
            "deliveries_per_s": (published * subscribers) as f64 / wall.as_secs_f64(),
        })
    );
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        if wanted("turn_overhead") {
            turn_overhead().await;
        }
        if wanted("concurrent_sessions") {
            concurrent_sessions().await;
        }
        if wanted("fanout") {
            fanout().await;
        }
    });
}
