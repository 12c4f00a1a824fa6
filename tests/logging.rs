//! `--log` and `--log-format`: the run's spans (run, job, step, session, turn, model call,
//! tool call) reach stderr as JSON lines with their GenAI fields; the API key never does;
//! without a filter only warnings are shown; a bad filter is a clear configuration error.

use crate::common;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

const KEY: &str = "sk-log-test-Hq71mW0zN4";

/// A pipeline whose agent step calls `read_file` once, then answers.
async fn agent_fixture() -> (ScriptedServer, Fixture) {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([ToolCall::new(
            "read_file",
            json!({ "path": "inbox/note.txt" }),
        )])
        .usage(11, 3),
        Reply::text("The note says hello.").usage(17, 5),
    ]))
    .await
    .expect("scripted server");
    let yaml = format!(
        "agents:\n  - name: a\n    source: {{ model: acme/m1, endpoint: \"{}\", api_key_env: ACME_LOG_KEY }}\n    tools: [read_file]\njobs:\n  - name: j\n    plan:\n      - task: write\n        run: echo hello > inbox/note.txt\n        outputs: [inbox]\n      - agent: a\n        inputs: [inbox]\n        prompt: What does the note say?\n",
        server.base_url()
    );
    (server, Fixture::new(&yaml))
}

/// The JSON log lines of stderr that close a span named `name`.
fn closed<'a>(lines: &'a [Value], name: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["fields"]["message"] == "close" && l["span"]["name"] == name)
        .collect()
}

/// The names of the spans a log line happened in, outermost first (for a span's close,
/// its ancestors).
fn ancestry(line: &Value) -> Vec<String> {
    line["spans"]
        .as_array()
        .map(|spans| {
            spans
                .iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_carry_the_spans_with_their_genai_fields_and_no_key() {
    let (_server, f) = agent_fixture().await;
    let (f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(
            &["run", "--log", "info", "--log-format", "json"],
            &[("ACME_LOG_KEY", KEY)],
        );
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);
    let stderr = run.stderr();
    assert!(!stderr.contains(KEY), "the key reached the logs:\n{stderr}");
    let lines: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!lines.is_empty(), "no JSON log line on stderr:\n{stderr}");

    let chats = closed(&lines, "chat");
    assert_eq!(chats.len(), 2, "two model calls:\n{stderr}");
    let chat = chats[1]["span"].clone();
    assert_eq!(chat["gen_ai.operation.name"], "chat", "{chat}");
    assert_eq!(chat["gen_ai.request.model"], "acme/m1", "{chat}");
    assert_eq!(chat["gen_ai.usage.input_tokens"], 17, "{chat}");
    assert_eq!(chat["gen_ai.usage.output_tokens"], 5, "{chat}");
    assert_eq!(
        ancestry(chats[1]),
        ["run", "job", "step", "session", "turn"],
        "{}",
        chats[1]
    );

    let tools = closed(&lines, "execute_tool");
    assert_eq!(tools.len(), 1, "{stderr}");
    assert_eq!(tools[0]["span"]["gen_ai.tool.name"], "read_file");
    assert_eq!(
        ancestry(tools[0]),
        ["run", "job", "step", "session", "turn"]
    );

    let turns = closed(&lines, "turn");
    assert_eq!(
        turns[0]["span"]["gen_ai.usage.input_tokens"], 28,
        "{}",
        turns[0]
    );
    let steps = closed(&lines, "step");
    let names: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["span"]["step.name"].as_str())
        .collect();
    assert_eq!(names, ["write", "a"], "{stderr}");
    assert!(
        steps
            .iter()
            .all(|s| s["span"]["step.status"] == "succeeded")
    );
    let runs = closed(&lines, "run");
    assert_eq!(runs.len(), 1, "{stderr}");
    assert_eq!(runs[0]["span"]["run.status"], "succeeded");
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_filter_no_info_lines_are_logged() {
    let (_server, f) = agent_fixture().await;
    let (_f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("ACME_LOG_KEY", KEY), ("RUST_LOG", "")]);
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);
    let stderr = run.stderr();
    assert!(
        !stderr.contains(" INFO ") && !stderr.contains("gen_ai"),
        "info lines without --log:\n{stderr}"
    );
}

#[test]
fn rust_log_is_used_when_there_is_no_log_flag() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let run = f.treadle_env(&["run"], &[("RUST_LOG", "treadle=info")]);
    run.expect_code(0);
    let stderr = run.stderr();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("INFO") && l.contains("step")),
        "RUST_LOG=treadle=info gives the step spans:\n{stderr}"
    );
}

#[test]
fn a_bad_log_filter_is_a_configuration_error() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let run = f.treadle(&["run", "--log", "treadle=loud"]);
    run.expect_code(2);
    let stderr = run.stderr();
    assert!(
        stderr.contains("invalid log filter \"treadle=loud\" (from --log)"),
        "{stderr}"
    );
    assert!(!f.path().join(".treadle").exists(), "nothing ran");
}
