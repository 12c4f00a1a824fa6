//! Benchmark: how soon the run page of a finished 1,000-step run is on screen in headless
//! Chromium (target: under 1 s).
//!
//! `treadle serve` runs a pipeline of 1,000 tasks (each prints one line) to its end; then
//! the browser opens the run's page five times. Each load reports, in ms since navigation
//! start: `first_contentful_paint_ms` (the browser's own paint timing: the page's frame),
//! `tree_painted_ms` (the page's `treadle:tree-painted` mark, set after the frame holding
//! all 1,000 rows was produced) and `settled_ms` (`treadle:settled`: every journaled event
//! replayed into the page and the final snapshot applied). One JSON object per line.
//!
//! `cargo bench --bench web_paint`. Under `cargo test` it runs at 50 steps and one load,
//! as a smoke test. Without chromium it prints why and does nothing.

#[path = "../tests/browser/mod.rs"]
mod browser;

#[path = "support/served.rs"]
mod served;

use served::{TOKEN, authorized_client};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn pipeline(steps: usize) -> String {
    let mut yaml = String::from("jobs:\n  - name: bench\n    plan:\n");
    for i in 0..steps {
        yaml.push_str(&format!("      - task: t{i}\n        run: echo step-{i}\n"));
    }
    yaml
}

/// A `treadle serve` process, stopped when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `treadle serve p.yml` in `dir`, once its discovery file names its address.
fn serve(dir: &Path) -> Served {
    let mut served = Served {
        child: Command::new(env!("CARGO_BIN_EXE_treadle"))
            .args(["serve", "p.yml", "--addr", "127.0.0.1:0"])
            .args(["--token-env", "BENCH_SERVER_TOKEN"])
            .env("BENCH_SERVER_TOKEN", TOKEN)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start treadle serve"),
        base: String::new(),
    };
    let discovery = dir.join(".treadle").join("server.json");
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&discovery)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
            && let Some(addr) = v["addr"].as_str()
        {
            served.base = format!("http://{addr}");
            return served;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "null".into())
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (steps, loads) = if full { (1000, 5) } else { (50, 1) };
    let Some(b) = browser::Browser::start("web_paint") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("p.yml"), pipeline(steps)).expect("pipeline");
    let server = serve(dir.path());
    let base = server.base.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // reqwest has no TLS provider of its own in this workspace (see treadle_session::tls).
    treadle_session::tls::install_crypto_provider();
    let client = authorized_client();
    let run_started = Instant::now();
    let id = rt.block_on(async {
        let answer: Value = client
            .post(format!("{base}/api/v1/runs"))
            .json(&json!({"pipeline": "p"}))
            .send()
            .await
            .expect("start run")
            .json()
            .await
            .expect("run id");
        answer["id"].as_u64().expect("run id")
    });
    loop {
        let run: Value = rt.block_on(async {
            client
                .get(format!("{base}/api/v1/runs/{id}"))
                .send()
                .await
                .expect("run")
                .json()
                .await
                .expect("run JSON")
        });
        if run["status"] != json!("running") {
            assert_eq!(run["status"], json!("succeeded"), "{run}");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let run_s = run_started.elapsed().as_secs_f64();
    // Warm the browser's cache of the page's assets, as a second visit would have it.
    b.goto(&format!("{base}/?token={TOKEN}"));
    for round in 0..loads {
        b.goto(&format!("{base}/runs/{id}"));
        let timing = b.wait_for(
            "the page to settle",
            "document.body.dataset.stream === 'ended' && (() => {
                const at = (n) => performance.getEntriesByName(n)[0]?.startTime;
                const fcp = performance.getEntriesByType('paint').find((p) => p.name === 'first-contentful-paint');
                return {tree: at('treadle:tree-painted'), settled: at('treadle:settled'),
                        fcp: fcp ? fcp.startTime : null, rows: document.querySelectorAll('.step').length};
            })()",
            Duration::from_secs(120),
        );
        assert_eq!(
            timing["rows"],
            json!(steps),
            "every step has a row: {timing}"
        );
        println!(
            "{{\"bench\":\"web_first_paint\",\"round\":{round},\"steps\":{steps},\"first_contentful_paint_ms\":{:.0},\"tree_painted_ms\":{:.0},\"settled_ms\":{:.0},\"run_s\":{run_s:.1},\"load_avg\":{}}}",
            timing["fcp"].as_f64().unwrap_or(f64::NAN),
            timing["tree"].as_f64().unwrap_or(f64::NAN),
            timing["settled"].as_f64().unwrap_or(f64::NAN),
            load_average()
        );
    }
    drop(b);
    drop(server);
}
