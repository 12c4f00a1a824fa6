//! `treadle serve` and its HTTP API, against the real binary: pipelines, starting a run,
//! listing and showing runs, cancelling, and the clear 4xx answers to bad input.

use crate::common;

use common::Fixture;
use common::server::{Server, eventually, get, post};
use serde_json::{Value, json};

const QUICK: &str = "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n      - in_parallel:\n          - task: a\n            run: echo a\n          - task: b\n            run: echo b\n";

const SLOW: &str = "jobs:\n  - name: main\n    plan:\n      - task: nap\n        run: sleep 30\n";

/// The run, once it has ended (the fork tests wait with it too).
pub(crate) async fn wait_ended(s: &Server, id: u64) -> Value {
    let started = std::time::Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            return run;
        }
        assert!(started.elapsed().as_secs() < 30, "run {id} never ended");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_run_started_through_the_api_is_listed_and_shown_as_a_tree() {
    let f = Fixture::new(QUICK);
    let s = Server::start(f.path(), &[], &[]);
    let (code, health) = get(&s, "/api/v1/health").await;
    assert_eq!((code, &health["ok"]), (200, &json!(true)));
    let (_, pipelines) = get(&s, "/api/v1/pipelines").await;
    assert_eq!(pipelines[0]["name"], "treadle");
    assert_eq!(pipelines[0]["jobs"], json!(["main"]));
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let run = wait_ended(&s, id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["trigger"], "api");
    assert_eq!(run["cost_usd"], Value::Null);
    let steps = run["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{run}");
    assert_eq!(steps[1]["kind"], "in_parallel");
    assert_eq!(steps[1]["children"].as_array().map(Vec::len), Some(2));
    assert_eq!(steps[0]["output_tail"], "hello\n");
    let (_, list) = get(&s, "/api/v1/runs?pipeline=treadle&limit=5").await;
    assert_eq!(list[0]["id"], id);
    let (_, none) = get(&s, "/api/v1/runs?pipeline=other").await;
    assert_eq!(none, json!([]));
    // A finished run cannot be cancelled.
    let (code, _) = post(&s, &format!("/api/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(code, 409);
}

#[tokio::test]
async fn cancel_aborts_a_running_run() {
    let f = Fixture::new(SLOW);
    let s = Server::start(f.path(), &[], &[]);
    let (_, started) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "trigger": "web"}),
    )
    .await;
    let id = started["id"].as_u64().expect("id");
    let (code, answer) = post(&s, &format!("/api/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!(answer["status"], "aborting");
    let run = wait_ended(&s, id).await;
    assert_eq!(run["status"], "aborted", "{run}");
    assert_eq!(run["trigger"], "web");
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_and_changes_nothing() {
    let f = Fixture::new(QUICK);
    let s = Server::start(f.path(), &[], &[]);
    let (code, body) = get(&s, "/api/v1/runs/99").await;
    assert_eq!(code, 404);
    assert!(
        body["error"].as_str().unwrap().contains("no run 99"),
        "{body}"
    );
    let (code, _) = get(&s, "/api/v1/runs/99/events").await;
    assert_eq!(code, 404);
    let (code, body) = get(&s, "/api/v1/runs/seven").await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = post(&s, "/api/v1/runs", json!({"pipeline": "nope"})).await;
    assert_eq!(code, 404);
    assert!(
        body["error"].as_str().unwrap().contains("served: treadle"),
        "{body}"
    );
    let (code, body) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "job": "x"}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, _) = post(&s, "/api/v1/runs/99/cancel", json!({})).await;
    assert_eq!(code, 404);
    // Nothing was started by any of it.
    let (_, list) = get(&s, "/api/v1/runs").await;
    assert_eq!(list, json!([]));
    // A malformed Last-Event-ID, on a run that exists.
    let (_, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    let id = started["id"].as_u64().expect("id");
    wait_ended(&s, id).await;
    for bad in ["x", "-1", "1.5", "", "99999999999999999999999"] {
        let r = s
            .http()
            .get(s.url(&format!("/api/v1/runs/{id}/events")))
            .header("Last-Event-ID", bad)
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status().as_u16(), 400, "Last-Event-ID {bad:?}");
        let body: Value = r.json().await.expect("json");
        assert!(
            body["error"].as_str().unwrap().contains("Last-Event-ID"),
            "{body}"
        );
    }
    eventually("the discovery file to exist", || {
        f.path().join(".treadle/server.json").exists()
    });
    let out = s.stop();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !f.path().join(".treadle/server.json").exists(),
        "discovery file left behind"
    );
}

#[tokio::test]
async fn vars_in_the_body_fill_the_pipeline_and_bad_ones_are_refused() {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: greet\n        run: echo hello ((who))\n",
    );
    let s = Server::start(f.path(), &[], &[]);
    let (code, body) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 422, "an unsupplied var: {body}");
    assert!(body["error"].as_str().unwrap().contains("who"), "{body}");
    let (code, _) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"who": [1]}}),
    )
    .await;
    assert_eq!(code, 400);
    let (code, _) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"no way": "x"}}),
    )
    .await;
    assert_eq!(code, 400);
    let (code, started) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"who": "world"}}),
    )
    .await;
    assert_eq!(code, 201, "{started}");
    let run = wait_ended(&s, started["id"].as_u64().unwrap()).await;
    assert_eq!(run["steps"][0]["output_tail"], "hello world\n", "{run}");
    // `treadle run --var` through the server.
    let dir = f.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        common::Run(
            std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
                .args(["run", "--var", "who=there"])
                .current_dir(dir)
                .output()
                .expect("run"),
        )
    })
    .await
    .unwrap();
    out.expect_code(0);
    assert!(out.stdout().contains("│ hello there"), "{}", out.stdout());
}
