//! Scale-out on a real 3-node JetStream cluster on loopback (three `nats-server` processes
//! joined by routes), one `treadle serve`, three `treadle worker` processes and the
//! scripted model:
//!
//! * `a_cluster_loses_a_node_then_all_and_every_step_runs_once`: the streams and buckets
//!   are made with 3 replicas (the cluster's size, detected). A run of 30 tasks (6 of them
//!   the cells of an `across:` step, which run on the workers with their values) and 5
//!   agent steps whose model calls an effectful tool: the node leading the steps stream is
//!   SIGKILLed mid-run and the run finishes while it is still down. Its store is then
//!   wiped (its disk lost) before it comes back: a second run finishes (the replicas fill
//!   it again). A third run has all three nodes killed for 20 s mid-run, then started
//!   again: it finishes. Every task, every tool effect, and every model call exactly once
//!   (counted in files outside the workers and by the model server). A copy of a step's
//!   message redelivered after an outage may reach the worker still running it: it is
//!   handed back (tests/nats_lease.rs shows it alone). The one rerun the design accepts, a
//!   worker stalled 6 s without renewing its lease (docs/scale-out.md), nothing here does.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::Fixture;
use common::nats::{Cluster, Worker, lines, wait_status};
use common::server::{Server, post};
use serde_json::json;

/// 24 tasks, an `across:` step of 6 cells and 5 agent steps at once, each task and cell
/// noting its start and its end (a second later) in `started`/`ended` (a cell also its
/// worker's pid in `cells` beside them), each agent's tool its effect in `effects`; `tag`
/// makes each run's lines its own.
fn wide(tag: &str, started: &Path, ended: &Path, effects: &Path) -> String {
    let mut steps = String::new();
    // Six tasks are the cells of an `across:` step; each notes the worker it ran on.
    steps.push_str(&format!(
        "          - across:\n              - var: n\n                values: [a, b, c, d, e, f]\n            task: cell\n            confined: false\n            max_in_flight: 6\n            run: echo {tag}-c{{{{ .vars.n }}}} >> {s}; echo \"{tag}-c{{{{ .vars.n }}}} $(awk '/^PPid:/ {{print $2}}' /proc/$PPID/status)\" >> {w}; sleep 1; echo {tag}-c{{{{ .vars.n }}}} >> {e}\n",
        s = started.display(),
        e = ended.display(),
        w = started.with_file_name("cells").display(),
    ));
    for i in 1..=24 {
        steps.push_str(&format!(
            "          - task: t{i:02}\n            confined: false\n            run: echo {tag}-t{i:02} >> {s}; sleep 1; echo {tag}-t{i:02} >> {e}\n",
            s = started.display(),
            e = ended.display()
        ));
        if i % 5 == 4 {
            steps.push_str(&format!(
                "          - agent: payer\n            name: a{n}\n            confined: false\n            prompt: Charge {tag}-a{n}.\n",
                n = i / 5 + 1
            ));
        }
    }
    format!(
        "agents:\n  - name: payer\n    tools:\n      - name: charge\n        description: Charges once.\n        run: echo charged >> {x}\njobs:\n  - name: {tag}\n    plan:\n      - in_parallel:\n{steps}",
        x = effects.display()
    )
}

fn counts(path: &Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for l in lines(path) {
        *n.entry(l).or_insert(0) += 1;
    }
    n
}

/// The server name of the node leading `stream`.
async fn leader(url: &str, stream: &str) -> String {
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let mut s = js.get_stream(stream).await.expect("stream");
    let info = s.info().await.expect("info");
    assert_eq!(info.config.num_replicas, 3, "{stream} has 3 replicas");
    info.cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("a leader")
}

/// Starts run of job `job`, waits until `n` tasks started, returns its id.
async fn start_run(server: &Server, job: &str, started: &Path, n: usize) -> u64 {
    let (code, body) = post(
        server,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "job": job}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let prefix = format!("{job}-");
    common::server::eventually("tasks started", || {
        lines(started)
            .iter()
            .filter(|l| l.starts_with(&prefix))
            .count()
            >= n
    });
    body["id"].as_u64().expect("id")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_loses_a_node_then_all_and_every_step_runs_once() {
    let test = "a_cluster_loses_a_node_then_all_and_every_step_runs_once";
    let Some(mut cluster) = Cluster::start(test) else {
        return;
    };
    cluster.formed().await;
    let model = common::nats::calling("charge", "charged").await;
    let env = [("TREADLE_LOCAL_URL", model.base_url())];
    let outside = tempfile::tempdir().expect("temp dir");
    let (started, ended, effects) = (
        outside.path().join("started"),
        outside.path().join("ended"),
        outside.path().join("effects"),
    );
    let mut yaml = String::new();
    for tag in ["one", "two", "three"] {
        let job = wide(tag, &started, &ended, &effects);
        let jobs = job.split_once("jobs:\n").expect("jobs").1;
        if yaml.is_empty() {
            yaml = job.clone();
        } else {
            yaml.push_str(jobs);
        }
    }
    let f = Fixture::new(&yaml);
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &cluster.url], &env);
    let workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&cluster.url, 6, &f.path().join(format!("w{i}")), &env))
        .collect();

    // One node down: the one leading the steps stream.
    let run = start_run(&server, "one", &started, 6).await;
    let victim = leader(&cluster.nodes[0].url, "TREADLE_STEPS").await;
    cluster.named(&victim).down();
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(
        done["status"], "succeeded",
        "finished with {victim} down: {done}"
    );
    // Its disk lost: it comes back empty, and the replicas fill it again.
    cluster.named(&victim).wipe();
    cluster.named(&victim).up();
    let run = start_run(&server, "two", &started, 6).await;
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(
        done["status"], "succeeded",
        "after {victim}'s store was lost: {done}"
    );

    // All three down for 20 s.
    let run = start_run(&server, "three", &started, 6).await;
    for node in &mut cluster.nodes {
        node.down();
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    for node in &mut cluster.nodes {
        node.up();
    }
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(
        done["status"], "succeeded",
        "after all nodes were down: {done}"
    );

    // Time for a redelivered copy to run again, were it to.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let logs: Vec<String> = workers.iter().map(Worker::log).collect();
    let (ran, finished) = (counts(&started), counts(&ended));
    assert_eq!(ran.len(), 90, "{ran:?}");
    assert!(
        ran.values().all(|&n| n == 1),
        "a task started twice: {ran:?}\n{}",
        logs.join("\n---\n")
    );
    assert_eq!(finished, ran, "each task finished once");
    assert_eq!(lines(&effects).len(), 15, "each tool effect once");
    // Each agent step asks twice (the tool call, then the answer): none asked again.
    assert_eq!(model.request_count(), 30, "no model call repeated");
    // The cells ran on the workers, with their own values.
    let pids: Vec<String> = workers.iter().map(|w| w.pid().to_string()).collect();
    let cells = lines(&started.with_file_name("cells"));
    assert_eq!(cells.len(), 18, "{cells:?}");
    for line in &cells {
        let pid = line.split_whitespace().nth(1).unwrap_or_default();
        assert!(
            pids.iter().any(|p| p == pid),
            "a cell ran off the workers: {line} {pids:?}"
        );
    }
    assert!(cells.iter().any(|l| l.starts_with("two-cf ")), "{cells:?}");
}
