//! An approval's policy through `treadle serve`'s API: a name the policy does not list is
//! refused (403, nothing written), each assignee's approval is one vote shown in the
//! approval's `answers` while it waits, and the second makes the quorum; `treadle
//! approvals` through the server shows the policy and the votes.

use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const GATED: &str = "jobs:\n  - name: ship\n    plan:\n      - approval:\n          name: deploy\n          message: Ship it?\n          assignees: [alice, bob]\n          approvers: 2\n      - task: deploy-now\n        run: echo deploying\n";

async fn until(s: &Server, what: &str, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (_, v) = get(s, path).await;
        if ok(&v) {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never {what}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_assignees_approve_through_the_api_and_a_stranger_is_forbidden() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &[], &[]);
    let (code, v) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_u64().expect("id");
    let pending = "/api/v1/approvals?state=pending";
    let list = until(&s, "pending", pending, |l| l[0]["step"] == "deploy").await;
    assert_eq!(list[0]["policy"]["assignees"], json!(["alice", "bob"]));
    assert_eq!(list[0]["policy"]["approvers"], 2);
    let path = format!("/api/v1/runs/{id}/approvals/{}", list[0]["seq"]);

    let (code, body) = post(&s, &path, json!({"decision": "approve", "by": "mallory"})).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("only alice, bob may"),
        "{body}"
    );
    let (code, one) = post(&s, &path, json!({"decision": "approve", "by": "alice"})).await;
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["status"], "pending", "one vote of two: {one}");
    assert_eq!(one["answers"][0]["by"], "alice");
    assert_eq!(one["answers"][0]["answer"], "approve");
    // `treadle approvals` goes through the server and shows the vote.
    let listed = f.treadle(&["approvals"]);
    listed.expect_code(0);
    assert!(
        listed.stdout().contains("2 of alice, bob; alice approved"),
        "{}",
        listed.stdout()
    );
    let (code, again) = post(&s, &path, json!({"decision": "approve", "by": "alice"})).await;
    assert_eq!(code, 409, "{again}");

    let (code, two) = post(
        &s,
        &path,
        json!({"decision": "approve", "by": "bob", "comment": "ok"}),
    )
    .await;
    assert_eq!(code, 200, "{two}");
    assert_eq!(two["status"], "approved", "{two}");
    assert_eq!(two["by"], "alice, bob");
    assert_eq!(two["comment"], "ok");
    let answers: Vec<&str> = two["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| a["by"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(answers, ["alice", "bob"]);
    let run = until(&s, "ended", &format!("/api/v1/runs/{id}"), |r| {
        r["status"] != "running"
    })
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
}
