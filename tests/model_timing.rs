//! Time to first token, measured as a model call's request to its first content byte,
//! against a scripted model that sends its headers at once and waits before its first
//! byte (as a model reading a long prompt does); and durations on the page rounded once.

use crate::common;

use std::time::Duration;

use common::Fixture;
use serde_json::Value;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Every object in `v` (depth first) that has the key `key`.
fn with_key<'v>(v: &'v Value, key: &str, out: &mut Vec<&'v Value>) {
    match v {
        Value::Object(map) => {
            if map.contains_key(key) {
                out.push(v);
            }
            map.values().for_each(|x| with_key(x, key, out));
        }
        Value::Array(items) => items.iter().for_each(|x| with_key(x, key, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn time_to_first_token_runs_from_the_request_to_the_first_content_byte() {
    let wait = Duration::from_millis(600);
    let server = ScriptedServer::builder()
        .first_byte_delay(wait)
        .start(Script::new([
            Reply::text("a considered answer").usage(10, 4)
        ]))
        .await
        .expect("server");
    let yaml = "agents:\n  - name: a\njobs:\n  - name: j\n    plan:\n      - agent: a\n        prompt: think first\n";
    let f = Fixture::new(yaml);
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["run", "--json"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("join");
    run.expect_code(0);
    let lines: Vec<Value> = run
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut calls = Vec::new();
    lines
        .iter()
        .for_each(|l| with_key(l, "first_token_ms", &mut calls));
    let call = calls
        .first()
        .unwrap_or_else(|| panic!("no model call in:\n{}", run.stdout()));
    let n = |k: &str| call[k].as_u64().unwrap_or_else(|| panic!("{k} in {call}"));
    let ttft = n("first_token_ms") - n("started_ms");
    let latency = n("ended_ms") - n("started_ms");
    assert!(
        ttft >= wait.as_millis() as u64 - 50,
        "time to first token {ttft} ms, but the model waited {} ms before its first byte: {call}",
        wait.as_millis()
    );
    assert!(ttft <= latency, "{call}");
}
