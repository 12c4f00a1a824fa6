//! The watcher's poll round, printed as JSON lines (`cargo bench --bench watch`).
//!
//! One watcher over a pipeline of 1,000 resources of a `resource_types:` type whose check
//! is a `printf` one-liner, and 1,000 jobs each triggered by one of them: the time of each
//! poll round (every resource checked, its versions recorded in the state file, every job
//! whose inputs moved queued) and the process's peak resident memory. The first round is
//! the cold start (every job queued); the later ones find nothing new. Nothing is built:
//! only the poller runs. Targets: under 2 s per round on 2 cores, under 50 MB.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it runs 100 resources for two
//! rounds, to keep the test suite short; the figures are then not the benchmark's.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use treadle::pipeline::CheckScope;
use treadle::run::Style;
use treadle::watch::{NoObserver, WatchConfig, Watched, Watcher};

fn pipeline(resources: usize) -> String {
    let mut yaml = String::from(
        "resource_types:\n  - name: counter\n    config:\n      check: |\n        printf '[{\"n\": \"{{ .source.n }}\"}]'\n      in: echo in\nresources:\n",
    );
    for i in 0..resources {
        yaml.push_str(&format!(
            "  - name: r{i}\n    type: counter\n    source: {{ n: \"{i}\" }}\n"
        ));
    }
    yaml.push_str("jobs:\n");
    for i in 0..resources {
        yaml.push_str(&format!(
            "  - name: j{i}\n    plan:\n      - get: r{i}\n        trigger: true\n"
        ));
    }
    yaml
}

/// A line of /proc/self/status in kB (`VmHWM`: peak resident memory).
fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (resources, rounds) = if full { (1000, 5) } else { (100, 2) };
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("treadle.yml");
    std::fs::write(&file, pipeline(resources)).expect("write pipeline");
    let scope = CheckScope {
        job: None,
        env: &|_| None,
        machine: false,
    };
    let loaded = treadle::pipeline::load(&file, &scope).expect("the pipeline loads");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let state = treadle::run::state_path(&file, None);
        let store = treadle::run::open_store(state).await.expect("state file");
        let config = WatchConfig {
            max_concurrent: 1,
            style: Style::Quiet,
            agents: treadle::run::agents::default_agent_runner(),
            observer: Arc::new(NoObserver),
        };
        let watched = Watched::of("bench".to_owned(), loaded);
        let watcher = Watcher::new(vec![watched], store, config).expect("watcher");
        for round in 0..rounds {
            let t0 = Instant::now();
            let did = watcher.clone().round(None).await;
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(did.checked, resources, "every check gave a version");
            assert_eq!(did.failed, 0);
            println!(
                "{}",
                json!({
                    "bench": "watch_poll_round",
                    "resources": resources,
                    "round": round,
                    "round_ms": ms,
                    "checked": did.checked,
                    "queued": did.queued,
                    "peak_rss_mb": status_kb("VmHWM:") as f64 / 1024.0,
                })
            );
        }
    });
}
