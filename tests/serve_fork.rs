//! Forking a finished run through `treadle serve` (`POST /api/v1/runs/{id}/fork`) and the
//! committed turns of an agent step it offers (`GET /api/v1/runs/{id}/steps/{seq}/turns`),
//! against the real binary with examples/review.yml on the scripted model: the fork is a
//! run of its own, linked to its parent, and the parent's records, transcript and session
//! are as they were.

use crate::common;
use crate::serve_api::wait_ended;

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// What the fork's reviewer is asked instead of the example's prompt.
pub const AGAIN: &str = "Look again, and say so.";

/// examples/review.yml's reviewer: read the notes, write a summary, approve, answer. Asked
/// [`AGAIN`] (the last user message), its summary is "Second look." instead of "Fine notes.".
pub fn review_script() -> Script {
    Script::from_fn(review_reply)
}

/// [`review_script`]'s answer to one request.
pub fn review_reply(body: &Value) -> Reply {
    {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let again = messages[last_user]["content"] == AGAIN;
        let done = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        let summary = if again { "Second look." } else { "Fine notes." };
        match done {
            0 => Reply::tool_call("read_file", json!({"path": "draft/notes.md"})).usage(300, 20),
            1 => Reply::tool_call(
                "write_file",
                json!({"path": "report/summary.md", "content": summary}),
            )
            .usage(400, 30),
            2 => Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "ok"}))
                .usage(450, 15),
            _ => Reply::text(summary).usage(480, 10),
        }
    }
}

/// The run's journaled events as the API streams them once it has ended.
async fn events(s: &Server, id: u64) -> String {
    s.http()
        .get(s.url(&format!("/api/v1/runs/{id}/events")))
        .send()
        .await
        .expect("events")
        .text()
        .await
        .expect("events body")
}

/// `treadle serve` on examples/review.yml with [`review_script`] as its model, and its
/// run 1, which succeeded.
async fn reviewed() -> (ScriptedServer, Fixture, Server, Value) {
    reviewed_on(review_script()).await
}

/// As [`reviewed`], with `script` as the model.
pub async fn reviewed_on(script: Script) -> (ScriptedServer, Fixture, Server, Value) {
    let model = ScriptedServer::start(script)
        .await
        .expect("scripted server");
    let f = Fixture::new(&common::example("review.yml"));
    let s = Server::start(
        f.path(),
        &["treadle.yml"],
        &[("TREADLE_LOCAL_URL", model.base_url())],
    );
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let run = wait_ended(&s, 1).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    (model, f, s, run)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_review_is_forked_through_the_api_and_the_parent_is_untouched() {
    let (_model, _f, s, parent) = reviewed().await;
    let reviewer = &parent["steps"][1];
    assert_eq!(reviewer["kind"], "agent", "{parent}");
    let seq = reviewer["seq"].as_u64().expect("seq");
    let path = reviewer["path"].as_str().expect("path").to_owned();

    // The reviewer's one committed turn: the example's prompt, and the points around it.
    let (code, turns) = get(&s, &format!("/api/v1/runs/1/steps/{seq}/turns")).await;
    assert_eq!(code, 200, "{turns}");
    assert_eq!(turns["step"], "reviewer");
    let list = turns["turns"].as_array().expect("turns");
    assert_eq!(list.len(), 1, "{turns}");
    assert!(
        list[0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Do these three steps, one tool call each:")),
        "{turns}"
    );
    assert_eq!(list[0]["ended"], json!(true));
    assert_eq!(list[0]["before"], json!(path));
    assert_eq!(list[0]["after"], json!(format!("{path}/1")));
    // A task step has no turns.
    let (code, body) = get(&s, "/api/v1/runs/1/steps/0/turns").await;
    assert_eq!(code, 404, "{body}");

    let parent_events = events(&s, 1).await;
    // Asked again, with another message, from the page's "fork from here" of turn 1.
    let (code, forked) = post(
        &s,
        "/api/v1/runs/1/fork",
        json!({"at": list[0]["before"], "prompt": AGAIN, "trigger": "web"}),
    )
    .await;
    assert_eq!(code, 201, "{forked}");
    let id = forked["id"].as_u64().expect("fork id");
    assert_eq!(id, 2);
    let fork = wait_ended(&s, id).await;
    assert_eq!(fork["status"], "succeeded", "{fork}");
    assert_eq!(fork["forked_from"], json!({"run": 1, "at": path}));
    assert_eq!(fork["trigger"], "web");
    // Before the fork point: from the parent; the reviewer ran again, on the new message.
    assert_eq!(fork["steps"][0]["cached"], json!(true), "{fork}");
    assert_eq!(fork["steps"][0]["from_run"], json!(1), "{fork}");
    assert_eq!(fork["steps"][1]["cached"], json!(false), "{fork}");
    let fork_events = events(&s, id).await;
    assert!(fork_events.contains("Second look."), "{fork_events}");
    assert!(
        fork_events.contains("forks run 1's session"),
        "{fork_events}"
    );
    assert!(!fork_events.contains("Fine notes."), "{fork_events}");
    // The fork's own turns are the new message.
    let (_, fork_turns) = get(&s, &format!("/api/v1/runs/{id}/steps/{seq}/turns")).await;
    assert_eq!(
        fork_turns["turns"][0]["message"],
        json!(AGAIN),
        "{fork_turns}"
    );

    // The parent: the same transcript, event for event; the same record; no link.
    assert_eq!(events(&s, 1).await, parent_events);
    let (_, again) = get(&s, "/api/v1/runs/1").await;
    assert_eq!(again, parent);
    assert!(again.get("forked_from").is_none(), "{again}");
    let (_, turns_after) = get(&s, &format!("/api/v1/runs/1/steps/{seq}/turns")).await;
    assert_eq!(turns_after, turns);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_that_cannot_be_made_is_refused_and_starts_nothing() {
    let (_model, _f, s, _) = reviewed().await;
    let refused = [
        ("/api/v1/runs/99/fork", json!({"at": "reviewer"}), 404),
        ("/api/v1/runs/one/fork", json!({"at": "reviewer"}), 400),
        ("/api/v1/runs/1/fork", json!({"at": " "}), 400),
        ("/api/v1/runs/1/fork", json!({"at": "no-such-step"}), 422),
        (
            "/api/v1/runs/1/fork",
            json!({"at": "reviewer", "trigger": "cron"}),
            400,
        ),
    ];
    for (path, body, want) in refused {
        let (code, answer) = post(&s, path, body.clone()).await;
        assert_eq!(code, want, "{path} {body}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    // Cross-site, the guard of every mutating route refuses it.
    let r = s
        .http()
        .post(s.url("/api/v1/runs/1/fork"))
        .header("Origin", "http://evil.example")
        .json(&json!({"at": "reviewer"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 403);
    let (_, list) = get(&s, "/api/v1/runs").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_still_running_is_not_forked() {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: nap\n        run: sleep 30\n",
    );
    let s = Server::start(f.path(), &[], &[]);
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let (code, answer) = post(&s, "/api/v1/runs/1/fork", json!({"at": "nap"})).await;
    assert_eq!(code, 409, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("still running")),
        "{answer}"
    );
    let (code, _) = post(&s, "/api/v1/runs/1/cancel", json!({})).await;
    assert_eq!(code, 202);
    let (_, list) = get(&s, "/api/v1/runs").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn treadle_run_fork_goes_through_the_server_that_owns_the_state_file() {
    let (_model, f, s, parent) = reviewed().await;
    let parent_events = events(&s, 1).await;
    // The CLI in another process, with no model of its own: the server runs the fork.
    let dir = f.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        common::Run(
            std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
                .args(["run", "--fork", "1", "--at", "reviewer", "--prompt", AGAIN])
                .current_dir(&dir)
                .env_remove("TREADLE_LOCAL_URL")
                .stdin(std::process::Stdio::null())
                .output()
                .expect("treadle run --fork"),
        )
    })
    .await
    .expect("join");
    assert_eq!(out.code(), 0, "{}\n{}", out.stdout(), out.stderr());
    // It followed the new run to its end, as a plain run through the server is followed.
    let printed = out.stdout();
    assert!(printed.contains("forks run 1's session"), "{printed}");
    assert!(printed.contains("reviewer"), "{printed}");
    assert!(
        !out.stderr().contains("do not go through it"),
        "{}",
        out.stderr()
    );

    let fork = wait_ended(&s, 2).await;
    assert_eq!(fork["status"], "succeeded", "{fork}");
    assert_eq!(fork["trigger"], "cli", "{fork}");
    assert_eq!(fork["forked_from"]["run"], json!(1), "{fork}");
    assert!(events(&s, 2).await.contains("Second look."));
    // The parent is as it was.
    assert_eq!(events(&s, 1).await, parent_events);
    let (_, again) = get(&s, "/api/v1/runs/1").await;
    assert_eq!(again, parent);

    // What does not go through the server yet is still refused, and starts nothing.
    let refused = f.treadle(&["run", "--resume", "1"]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr());
    assert!(
        refused.stderr().contains("owns the state file"),
        "{}",
        refused.stderr()
    );
    let (_, list) = get(&s, "/api/v1/runs").await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
}
