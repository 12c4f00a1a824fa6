//! An agent step's session moves with its step, against the real binaries (`treadle serve
//! --nats`, two `treadle worker` processes, `nats-server -js` on loopback, the scripted
//! model):
//!
//! * `a_step_taken_over_restores_its_session_and_asks_before_repeating_an_effect`: worker A
//!   runs an agent step whose model calls an effectful custom tool; the tool notes that it
//!   started, then waits for a `GO` file before it appends to a counter outside the
//!   workspace. Once it has started (its intent was mirrored to NATS before it could), A is
//!   killed with SIGKILL, its tool with it. Worker B takes the step over and restores the
//!   session from the mirrored events: the model is not asked again, the call is not run
//!   unasked, and an `effect` question is listed by `treadle approvals`. Approved with
//!   `treadle approve`, the call runs once more; the counter then holds exactly one charge,
//!   the model reads its result, and the run succeeds.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Fixture;
use common::nats::{Nats, Worker, lines, wait_status};
use common::server::{Server, post};
use serde_json::json;

/// A payer whose `charge` tool notes its start in `starts`, waits for `go`, then notes
/// the charge in `counter`.
fn paying(starts: &Path, go: &Path, counter: &Path) -> String {
    format!(
        "agents:\n  - name: payer\n    tools:\n      - name: charge\n        description: Charges the card once.\n        run: echo started >> {s}; while [ ! -e {g} ]; do sleep 0.05; done; echo charged >> {c}\njobs:\n  - name: main\n    plan:\n      - agent: payer\n        name: pay\n        confined: false\n        timeout: 300s\n        prompt: Charge the card.\n",
        s = starts.display(),
        g = go.display(),
        c = counter.display()
    )
}

/// Waits up to `limit` for `check`, saying `what` when it never holds.
async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_taken_over_restores_its_session_and_asks_before_repeating_an_effect() {
    let Some(nats) =
        Nats::start("a_step_taken_over_restores_its_session_and_asks_before_repeating_an_effect")
    else {
        return;
    };
    let model = common::nats::calling("charge", "paid").await;
    let url = model.base_url().to_string();
    let outside = tempfile::tempdir().expect("temp dir");
    let (starts, go, counter) = (
        outside.path().join("starts"),
        outside.path().join("GO"),
        outside.path().join("counter"),
    );
    let f = Fixture::new(&paying(&starts, &go, &counter));
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let mut a = Worker::start(&nats.url, 1, &f.path().join("wa"), &env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    // The tool starts only after its intent is journaled and mirrored.
    until("A's charge starts", Duration::from_secs(60), || {
        lines(&starts).len() == 1
    })
    .await;
    a.kill();
    let b = Worker::start(&nats.url, 1, &f.path().join("wb"), &env);
    // B restores the session: the call is asked about, not run again.
    let listed = || f.treadle(&["approvals"]).stdout();
    until(
        "the effect question is listed",
        Duration::from_secs(90),
        || listed().contains("effect:"),
    )
    .await;
    let list = listed();
    assert!(list.contains("charge"), "{list}");
    eprintln!("listed after the kill:\n{list}");
    assert_eq!(lines(&starts).len(), 1, "B did not run the call unasked");
    assert!(lines(&counter).is_empty(), "nothing charged yet");
    assert_eq!(model.request_count(), 1, "B asked the model nothing again");
    f.treadle(&["approve", &run.to_string(), "pay"])
        .expect_code(0);
    until("B's charge starts", Duration::from_secs(60), || {
        lines(&starts).len() == 2
    })
    .await;
    std::fs::write(&go, "").expect("GO");
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}\nB: {}", b.log());
    assert_eq!(
        lines(&counter),
        vec!["charged"],
        "charged once: A's tool died with A, B's ran as answered"
    );
    assert_eq!(
        model.request_count(),
        2,
        "one more model call, after the result"
    );
    let last = model.requests().last().expect("requests").body.clone();
    let result = last["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(
        result.contains("exit_code"),
        "the model read B's result: {result}"
    );
    assert!(
        b.log().contains("taken over; restoring session"),
        "B says it restored: {}",
        b.log()
    );
    drop(nats);
}
