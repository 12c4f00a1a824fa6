//! Shadow runs through `treadle serve` (`POST /api/v1/runs/{id}/shadow`, `GET
//! /api/v1/runs/{id}/shadows[/{n}]`), against the real binary with examples/review.yml on
//! the scripted model: the server runs the same shadow as `treadle run --shadow`, keeps its
//! report in the state file (still there after a restart), adds no run, and leaves the
//! source run as it was.

use crate::common;
use crate::serve_fork::{review_reply, reviewed_on};

use common::server::{Server, get, post};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script};

/// The model a shadow is asked to run on, which reviews otherwise.
pub const OTHER: &str = "other-model";

/// examples/review.yml's reviewer ([`review_reply`]); on [`OTHER`] it writes another summary
/// and rejects.
pub fn script() -> Script {
    Script::from_fn(|body: &Value| {
        if body["model"] != OTHER {
            return review_reply(body);
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        match messages.iter().filter(|m| m["role"] == "tool").count() {
            0 => Reply::tool_call("read_file", json!({"path": "draft/notes.md"})).usage(100, 5),
            1 => Reply::tool_call(
                "write_file",
                json!({"path": "report/summary.md", "content": "Not sure."}),
            )
            .usage(120, 6),
            2 => Reply::tool_call("verdict", json!({"verdict": "reject", "reason": "no"}))
                .usage(130, 7),
            _ => Reply::text("Rejected.").usage(140, 8),
        }
    })
}

/// Reads shadow `n` of `run` until it has ended.
async fn ended(s: &Server, run: u64, n: u64) -> Value {
    let path = format!("/api/v1/runs/{run}/shadows/{n}");
    for _ in 0..600 {
        let (code, shadow) = get(s, &path).await;
        assert_eq!(code, 200, "{shadow}");
        if shadow["status"] != "running" {
            return shadow;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("shadow {n} of run {run} did not end");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_run_in_the_server_is_kept_beside_its_source_run() {
    let (model, f, s, source) = reviewed_on(script()).await;
    let asked_before = model.requests().len();

    let (code, begun) = post(
        &s,
        "/api/v1/runs/1/shadow",
        json!({"model": format!("local/{OTHER}")}),
    )
    .await;
    assert_eq!(code, 202, "{begun}");
    assert_eq!(
        (begun["run"].clone(), begun["n"].clone()),
        (json!(1), json!(1)),
        "{begun}"
    );
    let other = ended(&s, 1, 1).await;
    assert_eq!(other["status"], "done", "{other}");
    assert_eq!(other["changed"], json!(true), "{other}");
    assert_eq!(other["model"], json!(format!("local/{OTHER}")));
    let step = &other["traced"]["report"]["steps"][0];
    assert_eq!(step["name"], "reviewer", "{other}");
    assert_eq!(step["model"], OTHER);
    assert_eq!(step["original_verdict"], "approve");
    assert_eq!(step["shadow_verdict"], "reject", "{other}");
    assert_eq!(step["verdict_changed"], json!(true));
    // The read is answered from the recording, the other write runs in scratch; the asserts
    // (the summary written, the notes read) still hold.
    assert_eq!(
        (step["replayed_calls"].clone(), step["live_calls"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(step["first_difference"]["index"], json!(1), "{step}");
    assert_eq!(
        step["first_difference"]["shadow"]["arguments"]["content"],
        "Not sure."
    );
    assert_eq!(step["failing_asserts"], json!([]), "{step}");
    assert_eq!(step["failure"], Value::Null, "{step}");
    assert_eq!(
        step["original"]["tokens"],
        json!(300 + 20 + 400 + 30 + 450 + 15 + 480 + 10)
    );
    assert_eq!(step["shadow"]["tokens"], json!(105 + 126 + 137 + 148));
    // The shadow step's own calls, for the page, the verdict left out as the report does.
    let trace = &other["traced"]["traces"][0];
    assert_eq!(trace["seq"], step["seq"]);
    let names: Vec<&str> = trace["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["read_file", "write_file"], "{trace}");
    // Only the shadow asked the model, and only on the other model.
    let asked = model.requests();
    assert_eq!(asked.len() - asked_before, 4);
    assert!(
        asked[asked_before..]
            .iter()
            .all(|r| r.body["model"] == OTHER)
    );

    // As the pipeline says now: the same calls and verdict, nothing changed.
    let (code, begun) = post(&s, "/api/v1/runs/1/shadow", json!({})).await;
    assert_eq!(code, 202, "{begun}");
    assert_eq!(begun["n"], json!(2));
    let same = ended(&s, 1, 2).await;
    assert_eq!(same["status"], "done", "{same}");
    assert_eq!(same["changed"], json!(false), "{same}");
    assert_eq!(
        same["traced"]["report"]["steps"][0]["first_difference"],
        Value::Null
    );

    // Not a run: the runs are the source alone, which is as it was.
    let (_, runs) = get(&s, "/api/v1/runs").await;
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    let (_, again) = get(&s, "/api/v1/runs/1").await;
    assert_eq!(again, source);
    let (code, list) = get(&s, "/api/v1/runs/1/shadows").await;
    assert_eq!(code, 200);
    assert_eq!(list, json!([other, same]));

    // Kept in the state file: a new server on it lists them as they were.
    drop(s);
    let s = Server::start(
        f.path(),
        &["treadle.yml"],
        &[("TREADLE_LOCAL_URL", model.base_url())],
    );
    let (_, kept) = get(&s, "/api/v1/runs/1/shadows").await;
    assert_eq!(kept, list);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_that_cannot_be_made_is_refused_and_keeps_nothing() {
    let (_model, _f, s, _) = reviewed_on(script()).await;
    let refused = [
        ("/api/v1/runs/99/shadow", json!({}), 404),
        ("/api/v1/runs/one/shadow", json!({}), 400),
        ("/api/v1/runs/1/shadow", json!({"model": "nowhere/x"}), 422),
        ("/api/v1/runs/1/shadow", json!({"agent_file": "a.yml"}), 422),
    ];
    for (path, body, want) in refused {
        let (code, answer) = post(&s, path, body.clone()).await;
        assert_eq!(code, want, "{path} {body}: {answer}");
    }
    let (code, _) = get(&s, "/api/v1/runs/99/shadows").await;
    assert_eq!(code, 404);
    let (code, _) = get(&s, "/api/v1/runs/1/shadows/1").await;
    assert_eq!(code, 404);
    let (_, list) = get(&s, "/api/v1/runs/1/shadows").await;
    assert_eq!(list, json!([]));
}
