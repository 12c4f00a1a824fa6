//! A step waiting on the NATS queue, and `across:` cells that collect outputs, against the
//! real binaries (`treadle serve --nats`, `treadle worker`, `nats-server -js` on loopback):
//!
//! * `a_step_reads_queued_until_a_worker_takes_it`: a server with no worker: its step reads
//!   `queued` in the API and in `treadle runs --steps` (through the server), and after the
//!   server's `--unclaimed-warning 2s` the server logs that it waits and that no worker was
//!   heard from. A worker started then takes it: the step reads `running` with the worker's
//!   name, then `succeeded`; the next two steps, in parallel on that worker's one slot,
//!   leave one waiting, logged with the worker seen. The run's events say `step_queued`,
//!   then `step_taken` with the worker, then `step_finished`.
//! * `across_cells_collecting_outputs_run_on_a_worker`: the cells of an `across:` step whose
//!   block collects `outputs:` run on the worker (each notes its process's worker), and
//!   their outputs come back into the server's run folder at `ARTIFACT/value`, as the local
//!   executor collects them; the step after the block reads them all.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Fixture;
use common::nats::{Nats, Worker, follow, lines, wait_status};
use common::server::{Server, get, post};
use serde_json::{Value, json};

/// The step named `name` in a run's tree, at any depth.
fn step<'a>(nodes: &'a Value, name: &str) -> Option<&'a Value> {
    nodes.as_array()?.iter().find_map(|n| {
        if n["name"] == name {
            Some(n)
        } else {
            step(&n["children"], name)
        }
    })
}

/// Waits up to 30 s for step `name` of run `run` to satisfy `ok`; the step then.
async fn step_until(s: &Server, run: u64, name: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (_, view) = get(s, &format!("/api/v1/runs/{run}")).await;
        if let Some(found) = step(&view["steps"], name).filter(|v| ok(v)) {
            return found.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "step `{name}` never got there: {view}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to 30 s for the file at `log` to hold a line containing every one of `parts`.
fn logged(log: &Path, parts: &[&str]) -> String {
    let mut found = String::new();
    common::server::eventually(&format!("a log line with {parts:?}"), || {
        found = lines(log)
            .into_iter()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .unwrap_or_default();
        !found.is_empty()
    });
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_reads_queued_until_a_worker_takes_it() {
    let Some(nats) = Nats::start("a_step_reads_queued_until_a_worker_takes_it") else {
        return;
    };
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: build\n        run: sleep 1; echo built\n      - in_parallel:\n          - task: left\n            run: sleep 4\n          - task: right\n            run: sleep 4\n",
    );
    let log = f.path().join("serve.log");
    let args = [
        "treadle.yml",
        "--nats",
        &nats.url,
        "--unclaimed-warning",
        "2s",
    ];
    let server = Server::start_logged(f.path(), &args, &[], &log);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    step_until(&server, run, "build", |s| s["status"] == "queued").await;
    let queued_at = Instant::now();
    let steps = f.treadle(&["runs", "--steps", &run.to_string()]);
    let row = steps
        .stdout()
        .lines()
        .find(|l| l.contains("build"))
        .map(str::to_owned);
    assert!(
        row.as_deref().is_some_and(|r| r.contains("queued")),
        "{}{}",
        steps.stdout(),
        steps.stderr()
    );
    let warned = logged(&log, &["step `build` has waited", "for a worker"]);
    let waited = queued_at.elapsed();
    assert!(
        warned.contains("no `treadle worker` has been heard from"),
        "{warned}"
    );
    // After the 2 s asked for, long before the default minute.
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(20),
        "warned after {waited:?}"
    );
    let (_, view) = get(&server, &format!("/api/v1/runs/{run}")).await;
    assert_eq!(
        step(&view["steps"], "build").map(|s| &s["status"]),
        Some(&json!("queued"))
    );

    let worker = Worker::start(&nats.url, 1, &f.path().join("w"), &[]);
    let name = format!("worker-{}-", worker.pid());
    let taken = step_until(&server, run, "build", |s| s["status"] != "queued").await;
    assert_eq!(taken["status"], "running", "{taken}");
    assert!(
        taken["worker"]
            .as_str()
            .is_some_and(|w| w.starts_with(&name)),
        "{taken}"
    );
    // One slot for two steps in parallel: one waits, and the log names the worker seen.
    let warned = logged(&log, &["has waited", "1 worker(s) seen", &name]);
    assert!(warned.contains("slots free"), "{warned}");
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}\n{}", worker.log());
    let build = step(&done["steps"], "build").expect("build");
    assert!(
        build["worker"]
            .as_str()
            .is_some_and(|w| w.starts_with(&name)),
        "{build}"
    );
    let events = follow(server.http(), server.base.clone(), run).await;
    let seq = build["seq"].clone();
    let of_build: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|e| e["seq"] == seq)
        .collect();
    let kinds: Vec<&str> = of_build
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|k| k.starts_with("step_"))
        .collect();
    assert_eq!(
        kinds,
        ["step_started", "step_queued", "step_taken", "step_finished"],
        "{of_build:?}"
    );
    assert_eq!(of_build[2]["worker"], build["worker"], "{of_build:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn across_cells_collecting_outputs_run_on_a_worker() {
    let Some(nats) = Nats::start("across_cells_collecting_outputs_run_on_a_worker") else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let (ran, gathered) = (outside.path().join("ran"), outside.path().join("gathered"));
    // Each cell notes the process that runs its command's parent: the worker, or the server.
    let f = Fixture::new(&format!(
        "jobs:\n  - name: main\n    plan:\n      - across:\n          - var: n\n            values: [a, b]\n        task: cell\n        confined: false\n        max_in_flight: 2\n        outputs: [out]\n        run: echo \"{{{{ .vars.n }}}} $(awk '/^PPid:/ {{print $2}}' /proc/$PPID/status)\" >> {r}; echo {{{{ .vars.n }}}} > out/value\n      - task: gather\n        confined: false\n        inputs: [out]\n        run: cat out/a/value out/b/value > {g}\n",
        r = ran.display(),
        g = gathered.display()
    ));
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let worker = Worker::start(&nats.url, 2, &f.path().join("w"), &[]);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}\n{}", worker.log());
    let mut cells = lines(&ran);
    cells.sort();
    let pid = worker.pid();
    assert_eq!(
        cells,
        [format!("a {pid}"), format!("b {pid}")],
        "ran on the worker"
    );
    assert_eq!(lines(&gathered), ["a", "b"]);
    // The server's run folder holds the block's artifact as a local run makes it.
    let artifacts = f
        .path()
        .join(".treadle")
        .join("runs")
        .join(run.to_string())
        .join("artifacts");
    let collected: Vec<_> = std::fs::read_dir(&artifacts)
        .expect("the run's artifacts")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("out."))
        })
        .filter(|p| p.join("a").join("value").is_file())
        .collect();
    assert_eq!(collected.len(), 1, "{collected:?}");
    for n in ["a", "b"] {
        let value = std::fs::read_to_string(collected[0].join(n).join("value")).expect("value");
        assert_eq!(value.trim(), n);
    }
}
