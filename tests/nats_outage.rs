//! Scale-out through NATS outages, against the real binaries (`treadle serve --nats`,
//! `treadle worker`, `nats-server -js` on loopback):
//!
//! * `steps_that_finish_while_nats_is_away_run_once`: workers are started while NATS is
//!   not up yet (they wait, saying so; one is given two URLs, the first dead); twelve
//!   tasks run at once, and NATS is killed while they run and kept away for longer than
//!   the ack wait, so every task finishes during the outage; `/api/v1/health` says 503
//!   meanwhile. When NATS is back the run succeeds and each task started and completed
//!   exactly once (files outside the workers).
//! * `a_step_lost_with_the_nats_store_is_queued_again`: a step is queued while no worker
//!   runs; NATS is killed and comes back with its store wiped (a single node's disk lost:
//!   the steps stream, its message and the buckets gone). The server notices the step is
//!   gone, makes the streams again and queues it again from its own copy, saying so; a
//!   worker started then runs it and the run succeeds: no silent hang.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Fixture;
use common::nats::{Nats, Worker, lines, wait_status};
use common::server::{Server, get, post};
use serde_json::json;

fn counts(path: &std::path::Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for l in lines(path) {
        *n.entry(l).or_insert(0) += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn steps_that_finish_while_nats_is_away_run_once() {
    let Some(mut nats) = Nats::reserve("steps_that_finish_while_nats_is_away_run_once") else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let (started, counter) = (
        outside.path().join("started"),
        outside.path().join("counter"),
    );
    let mut plan = String::new();
    for i in 1..=12 {
        plan.push_str(&format!(
            "          - task: t{i:02}\n            confined: false\n            run: echo t{i:02} >> {s}; sleep 3; echo t{i:02} >> {c}\n",
            s = started.display(),
            c = counter.display()
        ));
    }
    let f = Fixture::new(&format!(
        "jobs:\n  - name: main\n    plan:\n      - in_parallel:\n{plan}"
    ));
    // Started before NATS: they wait for it and say what they wait for.
    let two = format!("nats://127.0.0.1:1,{}", nats.url);
    let workers = [
        Worker::start_with(&["--nats", &two, "--slots", "4"], &f.path().join("w0"), &[]),
        Worker::start(&nats.url, 4, &f.path().join("w1"), &[]),
        Worker::start(&nats.url, 4, &f.path().join("w2"), &[]),
    ];
    common::server::eventually("the workers say they wait for NATS", || {
        workers[1].log().contains("waiting for a NATS server at")
    });
    assert!(
        !workers[1].log().contains("JetStream (`-js`)"),
        "{}",
        workers[1].log()
    );
    nats.up();
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    common::server::eventually("all twelve tasks running", || lines(&started).len() >= 12);
    nats.down();
    let (code, health) = get(&server, "/api/v1/health").await;
    assert_eq!(code, 503, "not ok while NATS is away: {health}");
    assert_eq!(health["nats"]["connected"], false, "{health}");
    // Longer than the ack wait (6 s): every task finishes while NATS is away.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(lines(&counter).len(), 12, "all finished during the outage");
    nats.up();
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // Time for a redelivered copy to run again, were it to.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (ran, finished) = (counts(&started), counts(&counter));
    assert_eq!(ran.len(), 12, "{ran:?}");
    let logs: Vec<String> = workers.iter().map(Worker::log).collect();
    assert!(
        ran.values().all(|&n| n == 1),
        "a task started twice: {ran:?}\n{}",
        logs.join("\n---\n")
    );
    assert!(
        finished.values().all(|&n| n == 1),
        "a task ran twice: {finished:?}"
    );
    let (code, health) = get(&server, "/api/v1/health").await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["nats"]["jetstream"], true, "{health}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_lost_with_the_nats_store_is_queued_again() {
    let Some(mut nats) = Nats::start("a_step_lost_with_the_nats_store_is_queued_again") else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let counter = outside.path().join("counter");
    let f = Fixture::new(&format!(
        "jobs:\n  - name: main\n    plan:\n      - task: t\n        confined: false\n        run: echo t >> {}\n",
        counter.display()
    ));
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let queued = || async {
        let (_, health) = get(&server, "/api/v1/health").await;
        health["nats"]["queued"].as_u64() == Some(1)
    };
    let started = std::time::Instant::now();
    while !queued().await {
        assert!(started.elapsed() < Duration::from_secs(30), "never queued");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nats.down();
    nats.wipe();
    nats.up();
    let _worker = Worker::start(&nats.url, 1, &f.path().join("w"), &[]);
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(lines(&counter), ["t"]);
    let out = server.stop();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("was lost by NATS"), "{said}");
}
