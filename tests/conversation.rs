//! An agent's conversation bounds in a pipeline, against the scripted server:
//! `max_context_bytes:` cuts a long tool result, `compact_after_tokens:` summarises the
//! older turns of a long step, and impossible values are located load errors.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A task writes a 3000-byte file; the agent reads it three times, then answers.
fn pipeline(agent_keys: &str) -> String {
    format!(
        r#"agents:
  - name: reader
    tools: [read_file]
{agent_keys}
jobs:
  - name: long
    plan:
      - task: make
        outputs: [big]
        run: for i in $(seq 1 300); do printf 'line %04d\n' $i; done > big/file.txt
      - agent: reader
        inputs: [big]
        prompt: Read big/file.txt three times, then say done.
        assert:
          tool_calls:
            - name: read_file
              args: {{ path: big/file.txt }}
"#
    )
}

fn is_summary(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("summarise the earlier part"))
}

fn reader() -> Script {
    let asked = AtomicU32::new(0);
    Script::from_fn(move |body| {
        if is_summary(body) {
            return Reply::text("The file was read twice; it lists numbered lines.");
        }
        match asked.fetch_add(1, Ordering::SeqCst) {
            0..3 => Reply::tool_call("read_file", json!({"path": "big/file.txt"})),
            _ => Reply::text("done"),
        }
    })
}

fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn max_context_bytes_cuts_one_long_tool_result() {
    let server = ScriptedServer::start(reader()).await.unwrap();
    let f = Fixture::new(&pipeline(
        "    max_context_bytes: 1KB\n    compact_after_tokens: 0",
    ));
    let (_f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| !is_summary(&r.body)),
        "compaction is off"
    );
    let results = tool_results(&requests[1].body);
    assert_eq!(results.len(), 1);
    assert!(results[0].starts_with("line 0001"), "{}", results[0]);
    assert!(
        results[0].contains("more bytes of this result were cut"),
        "{}",
        results[0]
    );
    assert!(results[0].len() < 1200, "{} bytes", results[0].len());
}

#[tokio::test(flavor = "multi_thread")]
async fn compact_after_tokens_summarises_a_long_step() {
    let server = ScriptedServer::start(reader()).await.unwrap();
    let f = Fixture::new(&pipeline("    compact_after_tokens: 1000"));
    let (_f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let requests = server.requests();
    let at = requests
        .iter()
        .position(|r| is_summary(&r.body))
        .expect("a summary was asked for");
    // The next request starts from the summary and keeps the newest call and its result.
    let next = &requests[at + 1].body;
    let summary = next["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .any(|text| text.contains("summarised to save space") && text.contains("read twice"));
    assert!(summary, "{next}");
    assert_eq!(tool_results(next).len(), 1);
}

#[test]
fn impossible_values_are_located_errors() {
    let f = Fixture::new(&pipeline("    context_window: 12"));
    let run = f.treadle(&["validate"]);
    let err = run.stderr();
    run.expect_code(2);
    assert!(err.contains("treadle.yml:4:21"), "{err}");
    assert!(
        err.contains("`context_window`") && err.contains("too small"),
        "{err}"
    );

    let f = Fixture::new(&pipeline("    compact_after_tokens: lots"));
    let run = f.treadle(&["validate"]);
    let err = run.stderr();
    run.expect_code(2);
    assert!(err.contains("treadle.yml:4:27"), "{err}");
    assert!(err.contains("compact_after_tokens"), "{err}");
}
