//! `treadle runs --show RUN`: a past run's transcript, from the state file, exactly as the
//! run printed it live (each agent step with its calls and results), and `--json`, the
//! same events as JSON lines.

use crate::common;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

const PIPELINE: &str = r#"
agents:
  - name: reader
    tools: [read_file]
jobs:
  - name: main
    plan:
      - task: write-note
        outputs: [inbox]
        run: echo "The code word is PELICAN." > inbox/note.txt
      - agent: reader
        inputs: [inbox]
        prompt: Read inbox/note.txt and tell me the code word.
"#;

#[tokio::test(flavor = "multi_thread")]
async fn show_prints_the_live_transcript_again_and_json_the_same_events() {
    let server = ScriptedServer::start(Script::new(vec![
        Reply::tool_call("read_file", json!({"path": "inbox/note.txt"})),
        Reply::text("The code word is PELICAN."),
    ]))
    .await
    .expect("server");
    let (f, live) = Fixture::new(PIPELINE).run_at(server.base_url()).await;
    live.expect_code(0);
    let shown = f.treadle(&["runs", "--show", "1"]);
    shown.expect_code(0);
    assert_eq!(
        shown.stdout(),
        live.stdout(),
        "the transcript as it was shown"
    );
    let out = shown.stdout();
    assert!(
        out.contains(r#"→ read_file {"path":"inbox/note.txt"}"#),
        "{out}"
    );
    assert!(
        out.contains("← read_file: The code word is PELICAN."),
        "{out}"
    );

    let json = f.treadle(&["runs", "--show", "1", "--json"]);
    json.expect_code(0);
    let events: Vec<Value> = json
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let agent: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["event"] == "agent")
        .map(|e| {
            (
                e["what"].as_str().unwrap_or_default(),
                e["data"]["name"].as_str().unwrap_or_default(),
            )
        })
        .filter(|(what, _)| what.starts_with("tool"))
        .collect();
    assert_eq!(
        agent,
        [("tool_call", "read_file"), ("tool_result", "read_file")]
    );
    let result = events
        .iter()
        .find(|e| e["what"] == "tool_result")
        .expect("a tool result");
    assert!(
        result.to_string().contains("PELICAN"),
        "the result itself is in the data: {result}"
    );
    assert_eq!(
        events.first().map(|e| &e["event"]),
        Some(&json!("run_started"))
    );
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&json!("run_finished"))
    );

    let missing = f.treadle(&["runs", "--show", "9"]);
    missing.expect_code(2);
    assert!(missing.stderr().contains('9'), "{}", missing.stderr());
}
