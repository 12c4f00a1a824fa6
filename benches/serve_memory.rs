//! Benchmark: the memory of `treadle serve` while 200 clients follow a run's event stream
//! and never read, on a run that prints 12 MB (issue 25 item 6), and whether it goes back
//! down once the run has ended and the clients have left.
//!
//! The server is the `treadle` binary in a process of its own, on a temporary project of two
//! pipelines, `plain` and `followed`, whose one task prints 3,000 lines of 4 KB. Its resident set is read from /proc/PID/status:
//! * `idle_mb`: started, before any run;
//! * `after_plain_run_mb`: after the same run with no follower (what a run itself leaves:
//!   the state file's cache, the allocator's arenas);
//! * `peak_mb`: the most during the followed run (sampled, and the kernel's VmHWM);
//! * `settled_mb`: 10 s after the followed run ended and the clients closed, with the
//!   samples at 1, 2 and 5 s.
//!
//! The same points of the anonymous part of the resident set (`anon_mb`: heap and stacks),
//! since the rest is the binary's pages, which grow with the code that has run (a debug
//! build's are most of its resident set). Also both runs' durations (what the followers
//! cost the run) and the load average.
//! `cargo bench --bench serve_memory` (release); `cargo test --bench serve_memory -- --bench`
//! measures a debug build. Under plain `cargo test` it runs at 1/50 scale as a smoke test.

#[path = "support/probe.rs"]
mod probe;
#[path = "support/served.rs"]
mod served;

use served::{TOKEN, authorized_client};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use probe::{anon_mb_of, loadavg, rss_and_peak_mb_of};
use serde_json::{Value, json};

/// Whether this is a real benchmark run (`cargo bench` passes `--bench`).
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// `n` in a benchmark run, a small fraction of it in a smoke run.
fn size(n: usize) -> usize {
    if full_run() { n } else { (n / 50).max(2) }
}

/// A task printing `lines` lines of about 4 KB, starting with `name` (each pipeline's own
/// command, so that neither run is a cache hit of the other: a hit replays no live output).
fn pipeline(name: &str, lines: usize) -> String {
    format!(
        "jobs:\n  - name: main\n    plan:\n      - task: loud\n        run: echo {name}; seq 1 {lines} | awk '{{ printf \"%s \", $0; for (i = 0; i < 400; i++) printf \"0123456789\"; print \"\" }}'\n"
    )
}

/// `treadle serve` in `dir`, and its address once it has written its discovery file.
fn serve(dir: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(["serve", "--addr", "127.0.0.1:0", "."])
        .args(["--token-env", "BENCH_SERVER_TOKEN"])
        .env("BENCH_SERVER_TOKEN", TOKEN)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("treadle serve");
    let discovery = dir.join(".treadle/server.json");
    for _ in 0..1200 {
        let addr = std::fs::read_to_string(&discovery)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["addr"].as_str().map(str::to_owned));
        if let Some(addr) = addr {
            return (child, addr);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server wrote no {}", discovery.display());
}

/// Starts a run of the project's pipeline `name`; its id.
async fn start(http: &reqwest::Client, base: &str, name: &str) -> u64 {
    let answer: Value = http
        .post(format!("{base}/api/v1/runs"))
        .json(&json!({ "pipeline": name }))
        .send()
        .await
        .expect("POST run")
        .json()
        .await
        .expect("run JSON");
    answer["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no run id: {answer}"))
}

/// Waits for run `id` to end, sampling the server's memory; the most resident and the most
/// anonymous memory it saw.
async fn follow(http: &reqwest::Client, base: &str, id: u64, pid: u32) -> (f64, f64) {
    let mut peak: (f64, f64) = (0.0, 0.0);
    loop {
        peak.0 = peak.0.max(rss_and_peak_mb_of(pid).0);
        peak.1 = peak.1.max(anon_mb_of(pid));
        let run: Value = http
            .get(format!("{base}/api/v1/runs/{id}"))
            .send()
            .await
            .expect("GET run")
            .json()
            .await
            .expect("run JSON");
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            return peak;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `n` connections that ask for run `id`'s events and never read.
fn silent_clients(addr: &str, id: u64, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            let request =
                format!("GET /api/v1/runs/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            s.write_all(request.as_bytes()).expect("request");
            s
        })
        .collect()
}

async fn measure(dir: &Path, clients: usize) -> Value {
    let (mut server, addr) = serve(dir);
    let pid = server.id();
    let base = format!("http://{addr}");
    let http = authorized_client();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_and_peak_mb_of(pid).0;
    let idle_anon = anon_mb_of(pid);

    let t = Instant::now();
    let plain = start(&http, &base, "plain").await;
    follow(&http, &base, plain, pid).await;
    let plain_s = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_plain = rss_and_peak_mb_of(pid).0;
    let after_plain_anon = anon_mb_of(pid);

    let t = Instant::now();
    let followed = start(&http, &base, "followed").await;
    let held = silent_clients(&addr, followed, clients);
    let sampled = follow(&http, &base, followed, pid).await;
    let followed_s = t.elapsed().as_secs_f64();
    let (at_end, hwm) = rss_and_peak_mb_of(pid);
    drop(held);
    let (mut after, mut after_anon) = (Vec::new(), Vec::new());
    for wait in [1, 1, 3, 5] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        after.push(rss_and_peak_mb_of(pid).0);
        after_anon.push(anon_mb_of(pid));
    }
    let _ = server.kill();
    let _ = server.wait();
    json!({
        "bench": "serve_memory", "clients": clients,
        "idle_mb": idle, "after_plain_run_mb": after_plain,
        "peak_mb": sampled.0.max(at_end).max(hwm), "at_run_end_mb": at_end,
        "after_close_1s_2s_5s_mb": &after[..3], "settled_mb": after[3],
        "anon_mb": {
            "idle": idle_anon, "after_plain_run": after_plain_anon, "peak_sampled": sampled.1,
            "after_close_1s_2s_5s": &after_anon[..3], "settled": after_anon[3],
        },
        "plain_run_s": plain_s, "followed_run_s": followed_s,
        "loadavg": loadavg(),
    })
}

fn main() {
    // reqwest has no TLS provider of its own in this workspace (see treadle_session::tls).
    treadle_session::tls::install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["plain", "followed"] {
        let file = dir.path().join(format!("{name}.yml"));
        std::fs::write(file, pipeline(name, size(3000))).expect("pipeline");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let line = runtime.block_on(measure(dir.path(), size(200)));
    println!("{line}");
}
