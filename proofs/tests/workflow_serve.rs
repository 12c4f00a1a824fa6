//! Workflows written in Rust served by a user's binary (`treadle::workflow::Server`, the
//! bin `treadle-workflow-server`), driven over HTTP as a client drives `treadle serve`: the
//! workflows are listed with their input schemas; a bad input is a 4xx saying what is wrong
//! and starts nothing; a good one starts a run that shows in the runs list, is followed to
//! its end through the API and its event stream, and has a page; a run is cancelled; and a
//! server killed with SIGKILL mid-run, started again, resumes the run it left (a new run on
//! the kept input, its finished steps replayed).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// How long a run may take to end (a guard against a hang, not a measure).
const ENDS_WITHIN: Duration = Duration::from_secs(120);

/// The served binary, killed (SIGKILL) when dropped, so that a failing test leaves none.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where a served binary answers, and the token a local client finds beside its state
/// file (`server.token`: every served server has one).
struct Api {
    base: String,
    token: String,
}

/// The served binary, started on `state`; where it answers once it listens.
fn serve(state: &Path, model: &str) -> (Served, Api) {
    treadle_session::tls::install_crypto_provider();
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle-workflow-server"))
        .args([state.to_str().expect("utf-8 path"), model])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the server starts");
    let out = child.stdout.take().expect("its stdout");
    let mut lines = BufReader::new(out).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("it says where it listens")
            .expect("a line");
        if let Some(rest) = line.strip_prefix("serving workflows on ") {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    // The rest of its stdout is drained, so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    // Written before the address is printed.
    let token = std::fs::read_to_string(state.with_file_name("server.token"))
        .expect("the server's token beside its state file")
        .trim()
        .to_owned();
    (Served(child), Api { base, token })
}

async fn get(api: &Api, path: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .expect("GET");
    (r.status().as_u16(), r.text().await.expect("body"))
}

async fn get_json(api: &Api, path: &str) -> Value {
    let (status, body) = get(api, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

async fn post(api: &Api, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", api.base))
        .bearer_auth(&api.token)
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Starts `pipeline` on `input`; its id.
async fn start(base: &Api, pipeline: &str, input: Value) -> u64 {
    let (status, body) = post(
        base,
        "/api/v1/runs",
        json!({ "pipeline": pipeline, "input": input }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_u64().expect("an id")
}

/// The run's view once `done` says so of it.
async fn wait_for(base: &Api, id: u64, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let view = get_json(base, &format!("/api/v1/runs/{id}")).await;
        if done(&view) {
            return view;
        }
        assert!(start.elapsed() < ENDS_WITHIN, "run {id} stays {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ended(view: &Value) -> bool {
    view["status"] != "running"
}

/// (name, status, cached) of each step of a run's view.
fn steps(view: &Value) -> Vec<(String, String, bool)> {
    view["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| {
                    let name = s["name"].as_str().unwrap_or_default().to_owned();
                    let status = s["status"].as_str().unwrap_or_default().to_owned();
                    (name, status, s["cached"] == true)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn review_replies() -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Fine notes."}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
        Reply::text("Done."),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_served_workflow_starts_on_a_checked_input_and_is_followed_to_its_end() {
    let model = ScriptedServer::start(Script::new(review_replies()))
        .await
        .expect("model");
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let (child, base) = serve(&state, model.base_url());

    let listed = get_json(&base, "/api/v1/pipelines").await;
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["review", "guide", "count"]);
    let count = &listed[2]["input_schema"];
    assert_eq!(count["properties"]["steps"]["type"], "integer", "{count}");

    // Bad inputs: a 4xx that says what is wrong, and no run.
    for (input, says) in [
        (json!({ "steps": "two", "pause": 0 }), "/steps"),
        (json!({ "steps": 1 }), "pause"),
        (json!(42), "not of type"),
    ] {
        let (status, body) = post(
            &base,
            "/api/v1/runs",
            json!({ "pipeline": "count", "input": input }),
        )
        .await;
        assert_eq!(status, 422, "{input}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{input}: {error}");
    }
    // As docs/workflows.md shows it.
    let (_, body) = post(
        &base,
        "/api/v1/runs",
        json!({ "pipeline": "count", "input": { "steps": "two", "pause": 0 } }),
    )
    .await;
    assert_eq!(
        body["error"],
        "the input does not fit the workflow's schema: at /steps: \"two\" is not of type \"integer\""
    );
    let (status, body) = post(
        &base,
        "/api/v1/runs",
        json!({ "pipeline": "count", "input": {"steps": 1, "pause": 0}, "vars": {"a": "b"} }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(get_json(&base, "/api/v1/runs").await, json!([]));

    // A good one: the review, to its end.
    let id = start(&base, "review", Value::Null).await;
    let view = wait_for(&base, id, ended).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["pipeline"], "review");
    assert_eq!(view["trigger"], "api");
    let names: Vec<String> = steps(&view)
        .into_iter()
        .map(|(n, s, _)| format!("{n} {s}"))
        .collect();
    assert_eq!(
        names,
        ["draft succeeded", "reviewer succeeded", "publish succeeded"]
    );
    let runs = get_json(&base, "/api/v1/runs").await;
    assert_eq!(runs[0]["id"], id, "{runs}");
    let (status, events) = get(&base, &format!("/api/v1/runs/{id}/events")).await;
    assert_eq!(status, 200);
    for event in ["run_started", "step_finished", "run_finished"] {
        assert!(events.contains(event), "{event} in {events}");
    }
    let (status, page) = get(&base, &format!("/runs/{id}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );

    // Cancelled while its first step sleeps.
    let id = start(&base, "count", json!({ "steps": 2, "pause": 30 })).await;
    let running = |v: &Value| steps(v).iter().any(|(_, s, _)| s == "running");
    wait_for(&base, id, running).await;
    let (status, body) = post(&base, &format!("/api/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    let view = wait_for(&base, id, ended).await;
    assert_eq!(view["status"], "aborted", "{view}");
    drop(child);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_left_running_by_a_killed_server_is_resumed_by_the_next() {
    let model = ScriptedServer::start(Script::new(Vec::new()))
        .await
        .expect("model");
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let (child, base) = serve(&state, model.base_url());
    let id = start(&base, "count", json!({ "steps": 3, "pause": 1 })).await;
    let first_done = |v: &Value| steps(v).first().is_some_and(|(_, s, _)| s == "succeeded");
    wait_for(&base, id, first_done).await;
    // SIGKILL: the run is left marked running.
    drop(child);

    let (child, base) = serve(&state, model.base_url());
    let runs = get_json(&base, "/api/v1/runs").await;
    let old = runs
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == id))
        .cloned()
        .expect("the old run is listed");
    let new = runs[0]["id"].as_u64().expect("the resuming run");
    assert!(new > id, "{runs}");
    // As a resume of a YAML run marks the run it resumes.
    assert_eq!(old["status"], "aborted", "{old}");
    let said = old["error"].as_str().unwrap_or_default();
    assert!(said.contains(&format!("resumed as run {new}")), "{old}");
    let view = wait_for(&base, new, ended).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let did = steps(&view);
    assert_eq!(did.len(), 3, "{view}");
    assert!(did[0].2, "the finished step is replayed: {view}");
    assert!(!did[2].2, "the step never run runs: {view}");
    drop(child);
}
