//! Agent steps across machines over NATS JetStream, against the real binaries: one
//! `treadle serve --nats`, `treadle worker` processes and a `nats-server -js` on loopback.
//!
//! * `a_paused_worker_loses_its_session_lease_and_writes_nothing`: one writer per agent
//!   session. Worker A takes an agent step and is paused (SIGSTOP) while the model answers;
//!   the step goes to worker B, which takes the session's lease over once A's is unrenewed
//!   for the lease time. A is continued (SIGCONT) while B runs the step: A's session
//!   appends are refused and its step is cancelled, so the tool call it was handed never
//!   runs; only B's tool call writes (a file outside the workspace names the writer's pid),
//!   and the run succeeds. Either defence alone passes this test (checked by switching
//!   each off in turn); with both off, A's call runs and the test fails.
//! * `a_workers_verdict_comes_back_with_its_note`: the record a worker sends back is taken
//!   whole, the reason given with a verdict (`note`) included.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Fixture;
use common::nats::{Nats, Worker, lines, wait_status};
use common::server::{Server, post};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A model that asks for one `run_shell` call noting the caller's pid in `writes`, then
/// says done; each streamed chunk after the first comes 400 ms late, so a worker can be
/// paused while its answer is on the way.
async fn noting_model(writes: &Path) -> ScriptedServer {
    // The command's parent is its keeper (src/keeper.rs); the worker is the keeper's parent.
    let command = format!(
        "awk '/^PPid:/ {{print $2}}' /proc/$PPID/status >> {}",
        writes.display()
    );
    ScriptedServer::builder()
        .chunk_delay(Duration::from_millis(400))
        .start(Script::from_fn(move |request| {
            let answered = request["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
            if answered {
                Reply::text("done").usage(5, 2)
            } else {
                Reply::tool_call("run_shell", json!({ "command": command })).usage(5, 2)
            }
        }))
        .await
        .expect("scripted server")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_worker_loses_its_session_lease_and_writes_nothing() {
    let Some(nats) = Nats::start("a_paused_worker_loses_its_session_lease_and_writes_nothing")
    else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let writes = outside.path().join("writes");
    let model = noting_model(&writes).await;
    let url = model.base_url().to_string();
    let f = Fixture::new(
        "agents:\n  - name: noter\n    tools: [run_shell]\njobs:\n  - name: main\n    plan:\n      - agent: noter\n        name: note\n        confined: false\n        prompt: Note your process.\n",
    );
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let a = Worker::start(&nats.url, 1, &f.path().join("wa"), &env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    // A asked the model; its answer (the tool call) is still streaming in.
    assert!(
        model.wait_requests(1, Duration::from_secs(60)).await,
        "A never asked the model"
    );
    a.signal("STOP");
    let paused = Instant::now();
    let b = Worker::start(&nats.url, 1, &f.path().join("wb"), &env);
    // B gets the step after A's delivery lapses, and asks the model once it took the lease.
    assert!(
        model.wait_requests(2, Duration::from_secs(90)).await,
        "B never ran the step: {}",
        b.log()
    );
    let took_over = paused.elapsed();
    a.signal("CONT");
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}\nB: {}", b.log());
    // A has had time to go on; its session must have written nothing since.
    common::server::eventually("A notices it lost the lease", || {
        a.log().contains("not committed here")
    });
    let writers = lines(&writes);
    assert_eq!(
        writers,
        vec![b.pid().to_string()],
        "only the lease holder's tool call ran (A is {})",
        a.pid()
    );
    assert!(
        a.log().contains("took over the step's lease"),
        "A says why: {}",
        a.log()
    );
    assert_eq!(
        model.request_count(),
        3,
        "A's session never sent its tool result to the model"
    );
    // The lease was taken over only after it went unrenewed for the lease time (6 s) on
    // top of the delivery's ack wait (6 s).
    assert!(took_over >= Duration::from_secs(10), "{took_over:?}");
    eprintln!("B took the session over {took_over:?} after A was paused");
    drop(nats);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workers_verdict_comes_back_with_its_note() {
    let Some(nats) = Nats::start("a_workers_verdict_comes_back_with_its_note") else {
        return;
    };
    let note = "the tests pass";
    let model = ScriptedServer::start(Script::new([
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": note})),
        Reply::text("Looks good to ship."),
    ]))
    .await
    .expect("scripted server");
    let url = model.base_url().to_string();
    let f = Fixture::new(
        "agents:\n  - name: reviewer\njobs:\n  - name: main\n    plan:\n      - agent: reviewer\n        prompt: Review the change.\n        verdicts: [approve, revise]\n",
    );
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let worker = Worker::start(&nats.url, 1, &f.path().join("w"), &env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(
        done["status"],
        "succeeded",
        "{done}\nworker: {}",
        worker.log()
    );
    let step = &done["steps"][0];
    assert!(!step["worker"].is_null(), "ran on the worker: {done}");
    assert_eq!(step["verdict"], "approve", "{done}");
    assert_eq!(step["note"], note, "{done}");
    drop(nats);
}
