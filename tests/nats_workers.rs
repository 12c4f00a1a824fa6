//! Scale-out over NATS JetStream, against the real binaries: one `treadle serve --nats`, three
//! `treadle worker` processes and a `nats-server -js` on loopback.
//!
//! * `a_killed_worker_loses_no_step_and_repeats_none`: a run of 30 steps (24 tasks, 6 agent
//!   steps against the scripted server); one worker is SIGKILLed while it runs a task. Every
//!   task completes exactly once (a counter file outside the workspace), the killed task is
//!   seen to start again on another worker, and the events the web view's stream showed live
//!   equal those of the same pipeline run by `treadle run --json` in one process (compared as
//!   sorted lists, without run ids, durations and the pipeline path; see
//!   [`normalised`]).
//! * `the_run_pauses_while_nats_is_away_and_completes`: NATS is killed mid-run and started
//!   again on the same port and store; the run completes, each step once.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::Fixture;
use common::nats::{Nats, Worker, follow, lines, wait_status};
use common::server::{Server, get, post};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// 24 tasks and 6 agent steps at once; each task notes its start (with its worker's pid)
/// and, a second later, its completion.
fn wide(started: &Path, counter: &Path) -> String {
    let mut steps = String::new();
    for i in 1..=24 {
        steps.push_str(&format!(
            "          - task: t{i:02}\n            confined: false\n            run: echo \"$TREADLE_STEP $(awk '/^PPid:/ {{print $2}}' /proc/$PPID/status)\" >> {s}; echo working $TREADLE_STEP; sleep 1; echo \"$TREADLE_STEP\" >> {c}\n",
            s = started.display(),
            c = counter.display()
        ));
        if i % 4 == 0 {
            steps.push_str(&format!(
                "          - agent: helper\n            name: a{:02}\n            prompt: Say done.\n",
                i / 4
            ));
        }
    }
    format!(
        "agents:\n  - name: helper\njobs:\n  - name: wide\n    plan:\n      - in_parallel:\n{steps}"
    )
}

fn counts(path: &Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for l in lines(path) {
        let name = l.split_whitespace().next().unwrap_or_default().to_owned();
        *n.entry(name).or_insert(0) += 1;
    }
    n
}

/// An event without what differs between any two runs of one pipeline: the run's id, wall
/// times (durations, when agent events were shown, model calls' times) and the pipeline's
/// path as each process names it.
fn normalised(json: &str) -> String {
    let mut v: Value = serde_json::from_str(json).expect("event JSON");
    if let Some(o) = v.as_object_mut() {
        for key in ["run", "duration_ms", "pipeline", "at_ms"] {
            o.remove(key);
        }
        // A model call's times (the page's latency and first token) are wall times too.
        if o.get("what").is_some_and(|w| w == "model_call")
            && let Some(data) = o.get_mut("data").and_then(Value::as_object_mut)
        {
            data.retain(|k, _| !k.ends_with("_ms"));
        }
    }
    v.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_loses_no_step_and_repeats_none() {
    let Some(nats) = Nats::start("a_killed_worker_loses_no_step_and_repeats_none") else {
        return;
    };
    let model = ScriptedServer::start(Script::from_fn(|_| Reply::text("done").usage(5, 2)))
        .await
        .expect("scripted server");
    let url = model.base_url().to_string();
    let outside = tempfile::tempdir().expect("temp dir");
    let (started, counter) = (
        outside.path().join("started"),
        outside.path().join("counter"),
    );
    let f = Fixture::new(&wide(&started, &counter));
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let mut workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&nats.url, 2, &f.path().join(format!("w{i}")), &env))
        .collect();
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let live = tokio::spawn(follow(server.http(), server.base.clone(), run));
    // Kill the worker of the first task that starts, while it sleeps mid-step.
    let victim = loop {
        let first = lines(&started).into_iter().next();
        if let Some(pid) = first.and_then(|l| l.split_whitespace().nth(1).map(str::to_owned)) {
            break pid.parse::<u32>().expect("pid");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let killed = workers
        .iter_mut()
        .find(|w| w.pid() == victim)
        .expect("the task's parent is one of the workers");
    killed.kill();
    let killed_steps: Vec<String> = lines(&started)
        .into_iter()
        .filter(|l| l.ends_with(&format!(" {victim}")))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(
        !killed_steps.is_empty(),
        "the killed worker was running a task"
    );
    let done = wait_status(&server, run, Duration::from_secs(180)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let completed = counts(&counter);
    for i in 1..=24 {
        let name = format!("t{i:02}");
        assert_eq!(
            completed.get(&name),
            Some(&1),
            "{name} completed {completed:?}"
        );
    }
    assert_eq!(completed.len(), 24, "{completed:?}");
    let restarts = counts(&started);
    for step in &killed_steps {
        assert!(
            restarts.get(step).copied().unwrap_or(0) >= 2,
            "{step}, killed mid-step, started again elsewhere: {restarts:?}"
        );
    }
    let streamed = live.await.expect("the live follower");
    // The same pipeline in one process.
    let alone_dir = tempfile::tempdir().expect("temp dir");
    let one = Fixture::new(&wide(
        &alone_dir.path().join("started"),
        &alone_dir.path().join("counter"),
    ));
    let alone = tokio::task::spawn_blocking(move || {
        one.treadle_env(&["run", "--json"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("the single-process run");
    alone.expect_code(0);
    let alone = alone.stdout();
    // Where a step waited and ran is the scale-out's own: each of the 30 steps was queued
    // and taken by a worker (the killed one's step twice), and `treadle run` has neither.
    let kind = |e: &String, what: &str| e.contains(&format!("\"event\":\"{what}\""));
    for what in ["step_queued", "step_taken"] {
        let n = streamed.iter().filter(|e| kind(e, what)).count();
        assert!(n >= 30, "{n} {what} events");
    }
    let mut ours: Vec<String> = streamed
        .iter()
        .filter(|e| !kind(e, "step_queued") && !kind(e, "step_taken"))
        .map(|e| normalised(e))
        .collect();
    let mut theirs: Vec<String> = alone.lines().map(normalised).collect();
    ours.sort();
    theirs.sort();
    // run_started, run_finished, and at least started and finished for each of 30 steps.
    assert!(ours.len() > 62, "{} events", ours.len());
    eprintln!(
        "killed worker {victim} mid-step in {killed_steps:?}; {} events compared",
        ours.len()
    );
    assert_eq!(ours.len(), theirs.len(), "event counts");
    assert_eq!(ours, theirs);
    drop(nats);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_pauses_while_nats_is_away_and_completes() {
    let Some(mut nats) = Nats::start("the_run_pauses_while_nats_is_away_and_completes") else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let counter = outside.path().join("counter");
    let mut plan = String::new();
    for i in 1..=6 {
        plan.push_str(&format!(
            "      - task: s{i}\n        confined: false\n        run: sleep 0.5; echo s{i} >> {}\n",
            counter.display()
        ));
    }
    let f = Fixture::new(&format!("jobs:\n  - name: main\n    plan:\n{plan}"));
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let _workers: Vec<Worker> = (0..2)
        .map(|i| Worker::start(&nats.url, 1, &f.path().join(format!("w{i}")), &[]))
        .collect();
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    common::server::eventually("two steps done", || lines(&counter).len() >= 2);
    nats.down();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, during) = get(&server, &format!("/api/v1/runs/{run}")).await;
    assert_eq!(during["status"], "running", "paused, not failed: {during}");
    nats.up();
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let completed = counts(&counter);
    assert_eq!(completed.len(), 6, "{completed:?}");
    assert!(completed.values().all(|&n| n == 1), "{completed:?}");
}
