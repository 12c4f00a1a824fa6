//! Approvals and receipts through `treadle serve`, with the real binary: answering through
//! the API wakes the waiting run at once, a second answer is refused with nothing changed,
//! `treadle approvals` and `treadle reject` go through the server, and a step's receipt says what its key is made of.

use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const GATED: &str = "jobs:\n  - name: ship\n    plan:\n      - task: build\n        run: echo built\n      - approval: deploy\n        message: Ship it?\n      - task: deploy-now\n        run: echo deploying\n";

async fn start(s: &Server) -> u64 {
    let (code, v) = post(s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{v}");
    v["id"].as_u64().expect("id")
}

async fn until_pending(s: &Server) -> Value {
    let started = Instant::now();
    loop {
        let (_, list) = get(s, "/api/v1/approvals?state=pending").await;
        if let Some(first) = list.as_array().and_then(|l| l.first()) {
            return first.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never pending");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn until_ended(s: &Server, id: u64) -> Value {
    let started = Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            return run;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never ended");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn approving_through_the_api_continues_the_run_and_a_second_answer_changes_nothing() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &[], &[]);
    let id = start(&s).await;
    let waiting = until_pending(&s).await;
    assert_eq!(waiting["run"], id);
    assert_eq!(waiting["step"], "deploy");
    assert_eq!(waiting["message"], "Ship it?");
    assert_eq!(waiting["pipeline"], "treadle");
    let path = format!("/api/v1/runs/{id}/approvals/{}", waiting["seq"]);
    let asked = Instant::now();
    let (code, decided) = post(
        &s,
        &path,
        json!({"decision": "approve", "comment": "looks good", "by": "web"}),
    )
    .await;
    assert_eq!(code, 200, "{decided}");
    // Woken at once, not at the next poll of the control directory.
    assert!(asked.elapsed() < Duration::from_secs(2));
    assert_eq!(decided["status"], "approved");
    assert_eq!(decided["by"], "web");
    assert_eq!(decided["comment"], "looks good");
    let run = until_ended(&s, id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    // Answered twice: 409, and the decision stands as it was.
    let (code, body) = post(&s, &path, json!({"decision": "reject", "by": "web"})).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("already decided"),
        "{body}"
    );
    let (_, decided_list) = get(&s, "/api/v1/approvals?state=decided").await;
    assert_eq!(decided_list[0]["status"], "approved");
    assert_eq!(decided_list[0]["by"], "web");
    let (_, pending) = get(&s, "/api/v1/approvals?state=pending").await;
    assert_eq!(pending, json!([]));
    // No approval there, a bad decision, a bad filter.
    let (code, _) = post(
        &s,
        &format!("/api/v1/runs/{id}/approvals/0"),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(code, 404);
    let (code, _) = post(&s, &path, json!({"decision": "maybe"})).await;
    assert_eq!(code, 400);
    let (code, _) = get(&s, "/api/v1/approvals?state=later").await;
    assert_eq!(code, 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn treadle_approvals_and_reject_go_through_the_server() {
    let with_deadline = GATED.replace(
        "message: Ship it?\n",
        "message: Ship it?\n        timeout: 1h\n        on_timeout: reject\n",
    );
    let f = Fixture::new(&with_deadline);
    let s = Server::start(f.path(), &[], &[]);
    let id = start(&s).await;
    until_pending(&s).await;
    let listed = f.treadle(&["approvals"]);
    listed.expect_code(0);
    let line = listed
        .stdout()
        .lines()
        .find(|l| l.contains("deploy"))
        .map(str::to_owned);
    let line = line.unwrap_or_else(|| panic!("no approval listed:\n{}", listed.stdout()));
    assert!(line.contains("Ship it?"), "{line}");
    assert!(line.contains("ship"), "the job: {line}");
    assert!(line.contains("→ reject"), "the deadline's answer: {line}");
    let dir = f.path().to_path_buf();
    let answer = tokio::task::spawn_blocking(move || {
        common::Run(
            std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
                .args(["reject", &id.to_string(), "deploy"])
                .current_dir(dir)
                .env("USER", "pat")
                .output()
                .expect("reject"),
        )
    })
    .await
    .expect("thread");
    answer.expect_code(0);
    assert!(
        answer.stdout().contains("rejected run 1 step 1 (deploy)"),
        "{}",
        answer.stdout()
    );
    let run = until_ended(&s, id).await;
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rejected by pat"),
        "{run}"
    );
    let again = f.treadle(&["approve", "1", "1"]);
    again.expect_code(2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receipt_shows_what_a_step_key_is_made_of() {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: make\n        outputs: [out]\n        run: echo x > out/x\n      - do:\n          - task: use\n            inputs: [out]\n            run: cat out/x\n",
    );
    let s = Server::start(f.path(), &[], &[]);
    let first = start(&s).await;
    until_ended(&s, first).await;
    let second = start(&s).await;
    until_ended(&s, second).await;
    let (code, r1) = get(&s, &format!("/api/v1/runs/{first}/steps/2/receipt")).await;
    assert_eq!(code, 200, "{r1}");
    assert_eq!(r1["hit"], false);
    assert_eq!(r1["kind"], "task");
    let names: Vec<&str> = r1["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["config", "input:out", "prev"]);
    let (_, r2) = get(&s, &format!("/api/v1/runs/{second}/steps/2/receipt")).await;
    assert_eq!(r2["hit"], true, "{r2}");
    assert_eq!(r2["from_run"], first);
    assert_eq!(r2["key"], r1["key"]);
    // A block has no key of its own; no such step; no such run.
    let (code, body) = get(&s, &format!("/api/v1/runs/{first}/steps/1/receipt")).await;
    assert_eq!(code, 404, "{body}");
    let (code, _) = get(&s, &format!("/api/v1/runs/{first}/steps/9/receipt")).await;
    assert_eq!(code, 404);
    let (code, _) = get(&s, "/api/v1/runs/77/steps/0/receipt").await;
    assert_eq!(code, 404);
}
