//! Benchmark: how many token deltas per second one run's event stream delivers to 10
//! concurrent SSE clients of `treadle serve`, every client receiving every delta.
//!
//! In one process: a state file in a temporary directory, the server's router on a loopback
//! port, one live run whose journal publishes the deltas, and 10 clients reading
//! `GET /api/v1/runs/1/events` over real HTTP and parsing the SSE. The publisher is paced on
//! the slowest client (it waits while half of the server's per-client queue,
//! `server::sse::QUEUE`, is published and not yet read by it), so that no client is cut off
//! for falling behind and loses deltas; each client checks it received all of them, in
//! order, then the run's end. Prints one JSON object per round. Target: at least 50,000 deltas/s.
//!
//! `cargo bench --bench sse` (release profile).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use treadle::run::event_log::{EventLog, LIVE_CAPACITY};
use treadle::server::app::router;
use treadle::server::client::SseParser;
use treadle::server::shared::{App, LiveRun};
use treadle::server::sse::QUEUE;

const CLIENTS: usize = 10;
const DELTAS: usize = 200_000;
const ROUNDS: usize = 3;

/// One client: counts token deltas until the run's end, publishing its count in `read`;
/// returns how many, in order.
async fn client(url: String, read: Arc<AtomicUsize>) -> usize {
    let response = reqwest::get(url).await.expect("GET events");
    let mut parser = SseParser::default();
    let mut body = response.bytes_stream();
    let mut seen = 0;
    while let Some(chunk) = body.next().await {
        for e in parser.feed(&chunk.expect("chunk")) {
            match e.event.as_str() {
                "token" => {
                    let expected = format!("{{\"seq\":0,\"text\":\"t{seen} \"}}");
                    assert_eq!(e.data, expected, "out of order");
                    seen += 1;
                    read.store(seen, Ordering::Relaxed);
                }
                "end" => return seen,
                _ => {}
            }
        }
    }
    seen
}

async fn round(app: &Arc<App>, base: &str, run: u64) -> f64 {
    let store = app.store.clone();
    let journal = Arc::new(EventLog::open(store.database(), run).expect("journal"));
    let live = LiveRun {
        journal: journal.clone(),
        cancel: CancellationToken::new(),
    };
    app.live.lock().expect("live").insert(run, live);
    journal
        .record(&format!(
            "{{\"event\":\"run_started\",\"run\":{run},\"job\":\"bench\",\"pipeline\":\"bench.yml\"}}"
        ))
        .expect("record");
    let read: Vec<Arc<AtomicUsize>> = (0..CLIENTS).map(|_| Arc::default()).collect();
    let clients: Vec<_> = read
        .iter()
        .map(|r| {
            tokio::spawn(client(
                format!("{base}/api/v1/runs/{run}/events"),
                r.clone(),
            ))
        })
        .collect();
    let slowest = || read.iter().map(|r| r.load(Ordering::Relaxed)).min();
    while journal.followers() < CLIENTS {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    for i in 0..DELTAS {
        while journal.backlog() > LIVE_CAPACITY / 2 || i - slowest().unwrap_or(i) > QUEUE / 2 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        journal.token(0, &format!("t{i} "));
    }
    journal
        .record(&format!(
            "{{\"event\":\"run_finished\",\"run\":{run},\"status\":\"succeeded\",\"duration_ms\":1}}"
        ))
        .expect("record");
    for c in clients {
        assert_eq!(c.await.expect("client"), DELTAS, "a client missed deltas");
    }
    let took = started.elapsed().as_secs_f64();
    app.live.lock().expect("live").remove(&run);
    DELTAS as f64 / took
}

fn main() {
    // reqwest has no TLS provider of its own in this workspace (see treadle_session::tls).
    treadle_session::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = treadle::run::open_store(dir.path().join("state.redb"))
            .await
            .expect("state file");
        let app = Arc::new(App {
            store: store.clone(),
            files: treadle::server::folder::Folder::new(Vec::new(), Vec::new()),
            live: Mutex::default(),
            token: None,
            cookie: treadle::server::token::cookie_name(0),
            identity: Default::default(),
            agents: treadle::run::agents::default_agent_runner(),
            shutdown: CancellationToken::new(),
            dispatcher: None,
            workflows: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let serving = router(app.clone());
        tokio::spawn(async move { axum::serve(listener, serving).await });
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        for r in 0..ROUNDS {
            let run = store
                .begin_run("bench.yml", "bench", 0, &[])
                .expect("run");
            let rate = round(&app, &base, run).await;
            println!(
                "{{\"bench\":\"sse_fanout\",\"round\":{r},\"clients\":{CLIENTS},\"deltas\":{DELTAS},\"deltas_per_s\":{rate:.0},\"deliveries_per_s\":{:.0},\"loadavg\":\"{}\"}}",
                rate * CLIENTS as f64,
                load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
            );
        }
    });
}
