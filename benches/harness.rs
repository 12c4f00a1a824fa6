//! Harness benchmarks, printed as JSON lines (`cargo bench --bench harness`).
//!
//! * `turn_overhead`: one 200-step tool turn against the scripted server, four ways in one
//!   run: a raw async-openai loop with no harness (the floor), treadle with a journal that
//!   does not fsync, treadle with the durable journal, and the same with the echo tool left
//!   effectful. Also the log sync the journal does, probed after each durable round.
//! * `turn_growth`: the same three ways at 100 and at 1,000 steps: whether treadle's own
//!   cost per step (treadle minus the raw loop) grows with the conversation.
//! * `concurrent_sessions`: 100 sessions × 20 steps at once, and 100 raw loops at once, in
//!   one run: wall time, and peak memory of treadle's part: the resident set, and the live
//!   heap (counted by `support/heap.rs` with `--count-heap` only, so that timing figures
//!   carry no cost per allocation), with what an idle session holds between turns.
//! * `fanout`: moved to `pkg-session/src/hub/tests.rs` (`hub_fanout_figure`, ignored), since
//!   the hub is private to the crate (only the loop actor publishes, rule 2).
//! * `restore`: restoring one session of 1,000, 10,000 and 100,000 committed tool steps
//!   (`TREADLE_BENCH_RESTORE_STEPS` for others), each in a child process: time, CPU, the
//!   journal's bytes and the child's peak memory (`support/restore.rs`).
//! * `batch_parallel`: one batch of 8 tool calls that each sleep 50 ms, from the first
//!   `ToolCallStarted` to the last `ToolCallCompleted` as a subscriber sees them (target:
//!   under 70 ms), without hooks and behind a `Policy` guard.
//!
//! Pass a name to run one: `cargo bench --bench harness -- fanout`. Add `--count-heap` for
//! `concurrent_sessions`' live-heap figures (they print as null without it).
//!
//! `support/heap.rs` is the counting allocator; `support/probe.rs` the disk-sync probes and
//! the /proc figures (memory, load) the JSON lines carry.

use std::time::Instant;

use probe::{
    loadavg, median, one_fsync_us, peak_rss_mb, redb_commit_us, reset_peak_rss, rss_mb,
    wal_appends_us,
};

#[path = "support/heap.rs"]
mod heap;
#[path = "support/probe.rs"]
mod probe;
#[path = "support/restore.rs"]
mod restore;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_scripted::{Script, ScriptedServer};
use treadle_session::event::{EventFilter, EventKind};
use treadle_session::journal::JournalStats;
use treadle_session::{Effect, FnTool, Journal, JournalOptions, Session, ToolError};

fn turn_steps() -> usize {
    size(200)
}

#[derive(Deserialize, JsonSchema)]
struct Echo {
    i: Value,
}

/// The echo tool, declared pure (it reads nothing and changes nothing), as a program would
/// declare it: its calls journal no effect intent or result.
fn echo() -> FnTool<
    Echo,
    impl Fn(Echo) -> std::future::Ready<Result<String, ToolError>> + Send + Sync + 'static,
> {
    echo_effectful().effect(Effect::Pure)
}

/// The same tool left at the default effect, effectful: each call journals its intent
/// before it runs (one more log sync per step, rule 11) and its result after.
fn echo_effectful() -> FnTool<
    Echo,
    impl Fn(Echo) -> std::future::Ready<Result<String, ToolError>> + Send + Sync + 'static,
> {
    FnTool::new("echo", "Returns its argument.", |a: Echo| {
        std::future::ready(Ok(a.i.to_string()))
    })
    // Measured as before calls were ordered by what they touch: each call in parallel.
    .touches_nothing()
}

async fn server(steps: usize) -> ScriptedServer {
    ScriptedServer::builder()
        .record(false)
        .start(Script::echo_until(steps))
        .await
        .expect("scripted server")
}

type RawClient = async_openai::Client<async_openai::config::OpenAIConfig>;

/// The raw loop's client; one per process part, shared by concurrent loops as a program
/// would.
fn raw_client(endpoint: &str) -> RawClient {
    use async_openai::config::OpenAIConfig;
    treadle_session::tls::install_crypto_provider();
    async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_base(endpoint)
            .with_api_key("none"),
    )
}

/// The floor: the same loop written directly on async-openai, no events, no journal.
async fn raw_loop(client: &RawClient) -> usize {
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

/// One turn of `steps` echo steps; returns the steps and what the journal did. The journal
/// is closed (checkpointed) before this returns, inside the caller's timing.
async fn treadle_turn(
    endpoint: &str,
    journal: Journal,
    steps: usize,
    effectful: bool,
) -> (u32, JournalStats) {
    let builder = Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal(journal.clone())
        .max_steps(steps as u32 + 2)
        .max_tool_calls_per_turn(steps as u32 + 2);
    let builder = if effectful {
        builder.tool(echo_effectful())
    } else {
        builder.tool(echo())
    };
    let session = builder.start().await.expect("session");
    let report = session.turn("go").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    session.shutdown().await;
    let stats = journal.stats();
    drop(session);
    drop(journal);
    (report.steps, stats)
}

/// One `three_ways` measurement.
struct Ways {
    /// Best per-step µs of the raw loop, treadle without fsync, treadle durable, and
    /// treadle durable with the effectful echo, over three rounds.
    best: [f64; 4],
    /// The median of the log-sync probes taken right after each durable round, so that
    /// they meet the disk in the state the rounds met it (its latency moves by 10x and more
    /// within minutes on a shared VM).
    fsync_us: f64,
    /// Journal batches (log syncs) per step of the last durable round, pure and effectful.
    syncs_per_step: [f64; 2],
    /// The mean time of one log append (write and `fdatasync`) in the journal itself, over
    /// the durable rounds, pure and effectful.
    journal_sync_us: [f64; 2],
}

/// The raw loop, treadle without fsync, treadle durable and treadle durable with an
/// effectful tool, three rounds each against one server, with a log-sync probe after each
/// durable round.
async fn three_ways(steps: usize, dir: &std::path::Path) -> Ways {
    let server = server(steps).await;
    let url = server.base_url().to_owned();
    let client = raw_client(&url);
    // Warm up connections and code paths once.
    raw_loop(&client).await;
    let mut best = [f64::MAX; 4];
    let mut syncs_per_step = [0.0; 2];
    let mut sync_time = [(0u64, 0u64); 2];
    let mut probes = Vec::new();
    for round in 0..3 {
        let t = Instant::now();
        let done = raw_loop(&client).await;
        best[0] = best[0].min(t.elapsed().as_secs_f64() * 1e6 / done as f64);

        let fast = Journal::open_with(
            dir.join(format!("fast{steps}-{round}.redb")),
            JournalOptions {
                durable: false,
                ..JournalOptions::default()
            },
        )
        .expect("journal");
        let t = Instant::now();
        let (done, _) = treadle_turn(&url, fast, steps, false).await;
        best[1] = best[1].min(t.elapsed().as_secs_f64() * 1e6 / f64::from(done));

        for (way, effectful) in [(2, false), (3, true)] {
            let name = format!("durable{steps}-{round}-{way}.redb");
            let durable = Journal::open(dir.join(name)).expect("journal");
            let t = Instant::now();
            let (done, stats) = treadle_turn(&url, durable, steps, effectful).await;
            best[way] = best[way].min(t.elapsed().as_secs_f64() * 1e6 / f64::from(done));
            syncs_per_step[way - 2] = stats.batches as f64 / f64::from(done);
            sync_time[way - 2].0 += stats.log_append_micros;
            sync_time[way - 2].1 += stats.batches;
            probes.extend(wal_appends_us(dir, 20));
        }
    }
    Ways {
        best,
        fsync_us: median(probes),
        syncs_per_step,
        journal_sync_us: sync_time.map(|(micros, batches)| micros as f64 / batches.max(1) as f64),
    }
}

async fn turn_overhead() {
    let dir = tempfile::tempdir().expect("dir");
    let ways = three_ways(turn_steps(), dir.path()).await;
    let best = ways.best;
    let fsync = ways.fsync_us;
    let redb_commit = redb_commit_us(dir.path());
    println!(
        "{}",
        json!({
            "bench": "turn_overhead", "steps": turn_steps(),
            "floor_per_step_us": best[0], "treadle_nofsync_per_step_us": best[1], "treadle_durable_per_step_us": best[2],
            "treadle_durable_effectful_per_step_us": best[3],
            "nofsync_over_floor": best[1] / best[0],
            "one_fsync_us": fsync,
            "one_fsync_at_end_us": median(wal_appends_us(dir.path(), 200)),
            // The probe this bench used before: an append (which also changes the file's
            // size) and its fdatasync, at the end of the run.
            "one_append_fsync_at_end_us": one_fsync_us(dir.path()),
            "one_redb_durable_commit_us": redb_commit,
            "log_syncs_per_step": ways.syncs_per_step[0],
            "log_syncs_per_step_effectful": ways.syncs_per_step[1],
            // The same unit measured inside the journal, during the rounds themselves.
            "journal_log_sync_us": ways.journal_sync_us[0],
            "journal_log_sync_effectful_us": ways.journal_sync_us[1],
            "durable_over_floor_in_journal_syncs": (best[2] - best[0]) / ways.journal_sync_us[0],
            "durable_extra_per_step_in_fsyncs": (best[2] - best[1]) / fsync,
            // Target (issue 14): at most 1.5.
            "durable_over_floor_in_fsyncs": (best[2] - best[0]) / fsync,
            "durable_effectful_over_floor_in_fsyncs": (best[3] - best[0]) / fsync,
            "loadavg": loadavg(),
        })
    );
}

/// Whether treadle's own work per step grows with the conversation: the same measurement at
/// 100 and at 1,000 steps in one turn, treadle's cost taken as treadle minus the raw loop
/// in the same run. The raw loop (and the server) re-send and re-parse the whole history
/// every step, so both grow; only the difference is treadle's.
async fn turn_growth() {
    let dir = tempfile::tempdir().expect("dir");
    let (short, long) = (size(100), size(1000));
    let a = three_ways(short, dir.path()).await.best;
    let b = three_ways(long, dir.path()).await.best;
    let own = |w: [f64; 4], i: usize| w[i] - w[0];
    println!(
        "{}",
        json!({
            "bench": "turn_growth", "short_steps": short, "long_steps": long,
            "short": { "floor_per_step_us": a[0], "treadle_nofsync_per_step_us": a[1], "treadle_durable_per_step_us": a[2] },
            "long": { "floor_per_step_us": b[0], "treadle_nofsync_per_step_us": b[1], "treadle_durable_per_step_us": b[2] },
            "own_nofsync_us": [own(a, 1), own(b, 1)],
            "own_durable_us": [own(a, 2), own(b, 2)],
            // Target (issue 14): at most 1.2.
            "own_long_over_short_nofsync": own(b, 1) / own(a, 1),
            "own_long_over_short_durable": own(b, 2) / own(a, 2),
            "loadavg": loadavg(),
        })
    );
}

/// 100 sessions × 20 steps at once, sharing one durable journal, against the same number of
/// raw loops at once, in one run: wall time per step of each, and the process's peak memory
/// during treadle's part (measured first, from a reset high-water mark; the in-process
/// scripted server is included).
async fn concurrent_sessions() {
    let (sessions, steps) = (size(100), size(20));
    let dir = tempfile::tempdir().expect("dir");
    let server = server(steps).await;
    let url = server.base_url().to_owned();
    let base_rss = reset_peak_rss();
    let base_heap = heap::live_bytes();
    heap::reset_peak();
    let journal = Journal::open(dir.path().join("many.redb")).expect("journal");
    let mut all = Vec::new();
    for _ in 0..sessions {
        all.push(
            Session::builder()
                .endpoint(&url)
                .model("scripted")
                .journal(journal.clone())
                .max_steps(steps as u32 + 2)
                .tool(echo())
                .start()
                .await
                .expect("session"),
        );
    }
    let started_heap = heap::live_bytes();
    let t = Instant::now();
    let reports = futures::future::join_all(all.iter().map(|s| s.turn("go").run())).await;
    let wall = t.elapsed();
    let idle_rss = rss_mb();
    let peak_heap = heap::peak_bytes();
    for report in reports {
        let report = report.expect("run");
        assert!(
            report.is_done() && report.steps as usize == steps + 1,
            "{report:?}"
        );
    }
    let peak = peak_rss_mb();
    let stats = journal.stats();
    // What the sessions hold between turns: the live heap with them idle, less the live heap
    // once they are gone (the journal, the shared client's pooled connections and the
    // server's stay in both).
    let idle_heap = heap::live_bytes();
    for session in &all {
        session.shutdown().await;
    }
    drop(all);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let gone_heap = heap::live_bytes();
    drop(journal);

    let t = Instant::now();
    let client = raw_client(&url);
    let raw = futures::future::join_all((0..sessions).map(|_| raw_loop(&client))).await;
    let raw_wall = t.elapsed();
    assert!(
        raw.iter().all(|&n| n == steps + 1),
        "every raw loop ran {steps} tool steps"
    );
    let per_step =
        |wall: std::time::Duration| wall.as_secs_f64() * 1e6 / (sessions * (steps + 1)) as f64;
    let per_session_kb = |bytes: usize| bytes as f64 / 1024.0 / sessions as f64;
    println!(
        "{}",
        json!({
            "bench": "concurrent_sessions", "sessions": sessions, "steps": steps,
            "wall_s": wall.as_secs_f64(), "per_step_us": per_step(wall),
            "raw_wall_s": raw_wall.as_secs_f64(), "raw_per_step_us": per_step(raw_wall),
            // Target (issue 14): at most 1.5.
            "over_raw": wall.as_secs_f64() / raw_wall.as_secs_f64(),
            "journal_batches": stats.batches, "journal_events": stats.events,
            "rss_before_mb": base_rss,
            // Target (issue 14): under 25 MB.
            "peak_rss_mb": peak,
            "rss_after_turns_mb": idle_rss,
            "heap_before_mb": heap::counting().then(|| heap::mb(base_heap)),
            "heap_peak_mb": heap::counting().then(|| heap::mb(peak_heap)),
            "heap_per_started_session_kb": heap::counting().then(|| per_session_kb(started_heap.saturating_sub(base_heap))),
            "heap_per_idle_session_kb": heap::counting().then(|| per_session_kb(idle_heap.saturating_sub(gone_heap))),
            "heap_after_sessions_gone_mb": heap::counting().then(|| heap::mb(gone_heap)),
            "loadavg": loadavg(),
        })
    );
}

#[derive(Deserialize, JsonSchema)]
struct Nap {
    ms: u64,
}

/// 8 calls × 50 ms in one batch: the span from the first call's start to the last call's
/// end, as a subscriber receives the events, over several turns (best and median).
async fn batch_parallel() {
    use treadle_scripted::{Reply, ToolCall};
    let (calls, nap_ms) = (8usize, 50u64);
    let rounds = if full_run() { 20 } else { 2 };
    for guarded in [false, true] {
        let mut replies = Vec::new();
        for _ in 0..rounds {
            replies.push(Reply::tool_calls(
                (0..calls).map(|_| ToolCall::new("nap", json!({ "ms": nap_ms }))),
            ));
            replies.push(Reply::text("done"));
        }
        let server = ScriptedServer::builder()
            .record(false)
            .start(Script::new(replies))
            .await
            .expect("scripted server");
        let dir = tempfile::tempdir().expect("dir");
        let mut builder = Session::builder()
            .endpoint(server.base_url())
            .model("scripted")
            .journal_path(dir.path().join("batch.redb"))
            .tool(
                FnTool::new("nap", "Sleeps ms milliseconds.", |a: Nap| async move {
                    tokio::time::sleep(std::time::Duration::from_millis(a.ms)).await;
                    Ok::<_, ToolError>("rested".to_owned())
                })
                // The batch's naps overlap, as the figures measure.
                .touches_nothing(),
            );
        if guarded {
            builder = builder.hook(treadle_session::hook::Policy::new().allow("nap"));
        }
        let session = builder.start().await.expect("session");
        let mut spans = Vec::new();
        for _ in 0..rounds {
            let mut sub = session.subscribe(EventFilter::all());
            let input = session.turn("go").submit().await.expect("submit");
            let (mut first, mut last, mut completed) = (None, None, 0);
            while let Some(Ok(delivery)) = sub.next().await {
                match &delivery.event.kind {
                    EventKind::ToolCallStarted { .. } => {
                        first.get_or_insert_with(Instant::now);
                    }
                    EventKind::ToolCallCompleted { is_error, .. } => {
                        assert!(!is_error, "a nap failed");
                        completed += 1;
                        last = Some(Instant::now());
                    }
                    kind if kind.terminal().is_some()
                        && delivery.event.header.cause
                            == Some(treadle_session::event::Cause::Input(input)) =>
                    {
                        break;
                    }
                    _ => {}
                }
            }
            assert_eq!(completed, calls, "every call completed");
            if let (Some(first), Some(last)) = (first, last) {
                spans.push((last - first).as_secs_f64() * 1e3);
            }
        }
        session.shutdown().await;
        spans.sort_by(f64::total_cmp);
        println!(
            "{}",
            json!({
                "bench": "batch_parallel", "calls": calls, "sleep_ms": nap_ms,
                "policy_guard": guarded, "rounds": spans.len(),
                "best_ms": spans.first(), "median_ms": spans.get(spans.len() / 2),
                "worst_ms": spans.last(), "target_ms": 70,
            })
        );
    }
}

/// Whether this is a real benchmark run. `cargo bench` passes `--bench`; `cargo test`
/// runs this binary without it, as a quick smoke test of the benchmark code itself.
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// `n` in a benchmark run, a small fraction of it in a smoke run.
fn size(n: usize) -> usize {
    if full_run() { n } else { (n / 50).max(2) }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == restore::CHILD_FLAG) {
        return restore::child(&args[at + 1..]);
    }
    if std::env::args().any(|a| a == "--count-heap") {
        heap::count();
    }
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
        if wanted("turn_growth") {
            turn_growth().await;
        }
        if wanted("concurrent_sessions") {
            concurrent_sessions().await;
        }
        if wanted("fanout") {
            eprintln!(
                "fanout moved into treadle-session (the hub is private): \
                 cargo test -p treadle-session --release --lib -- --ignored hub_fanout --nocapture"
            );
        }
        if wanted("batch_parallel") {
            batch_parallel().await;
        }
        if wanted("restore") {
            let server = server(1).await;
            restore::run(server.base_url(), full_run()).await;
        }
    });
}
