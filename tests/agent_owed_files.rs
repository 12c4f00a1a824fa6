//! The files an agent step's `assert: files:` demands, against the scripted model server: a
//! model that ends its turn without one is told which file it owes and goes on (five
//! times at most, then the step fails naming the file), and its verdict is refused while
//! the file is missing.

use crate::common;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

/// The steps docs' example: an agent that must write `answer/reply.md`, and a task that
/// reads it.
const RESPONDER: &str = r#"
agents:
- name: responder
  tools: [write_file]
jobs:
- name: answer
  plan:
  - agent: responder
    outputs: [answer]
    prompt: "Answer the question. Write your answer to answer/reply.md."
    assert:
      files: [answer/reply.md]
  - task: deliver
    inputs: [answer]
    run: cat answer/reply.md
"#;

/// The text of the `user` messages of a request, in order.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `tool` messages of a request, in order.
fn tool_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_answers_in_prose_is_told_the_file_it_owes_and_then_writes_it() {
    let server = ScriptedServer::start(Script::new([
        // It answers in prose first and writes nothing ...
        Reply::text("The answer is widgets.json."),
        // ... is told which file it owes, and writes it.
        Reply::tool_call(
            "write_file",
            json!({"path": "answer/reply.md", "content": "widgets.json\n"}),
        ),
        Reply::text("Written."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(RESPONDER).run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    // The task downstream read what the agent wrote.
    assert!(out.contains("widgets.json"), "{out}");
    assert!(
        out.contains("file(s) `answer/reply.md` are missing"),
        "{out}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{out}");
    // The reminder is in the model's request log, naming the file.
    let asked = user_texts(&requests[1].body);
    let reminder = asked.last().expect("a reminder");
    assert!(
        reminder.contains("`answer/reply.md` is not there"),
        "{reminder}"
    );
    // A file has no tool to force: the reminder's call leaves the choice to the model.
    assert!(
        requests[1].body.get("tool_choice").is_none(),
        "{}",
        requests[1].body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_never_writes_the_file_gets_five_reminders_then_the_step_fails_naming_it() {
    let server = ScriptedServer::start(Script::new(
        (0..8).map(|i| Reply::text(format!("The answer is widgets.json ({i})."))),
    ))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(RESPONDER).run_at(server.base_url()).await;
    run.expect_code(1);
    let out = run.stdout();
    // The first answer and five reminders; the chances do not reset.
    assert_eq!(server.request_count(), 6, "{out}");
    assert_eq!(
        out.matches("file(s) `answer/reply.md` are missing").count(),
        5,
        "{out}"
    );
    assert!(
        out.contains("step `responder` failed: assert failed: assert files: answer/reply.md"),
        "{out}"
    );
    // The task that would read the file never ran.
    assert!(out.contains("- deliver skipped"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verdict_is_refused_while_a_demanded_file_is_missing() {
    let yaml = r#"
agents:
- name: reviewer
  tools: [write_file]
jobs:
- name: review
  plan:
  - agent: reviewer
    outputs: [review]
    prompt: "Review the change; write review/summary.md, then decide."
    verdicts: [approve, revise]
    assert:
      files: [review/summary.md]
      verdict: approve
"#;
    let server = ScriptedServer::start(Script::new([
        // It decides before it has written anything: refused, naming the file.
        Reply::tool_call("verdict", json!({"choice": "approve", "note": "fine"})),
        Reply::tool_calls([ToolCall::new(
            "write_file",
            json!({"path": "review/summary.md", "content": "Looks right.\n"}),
        )]),
        Reply::tool_call("verdict", json!({"choice": "approve", "note": "fine"})),
        Reply::text("Approved."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    let requests = server.requests();
    let results = tool_texts(&requests.last().expect("a request").body);
    assert!(
        results[0].contains("no decision can be recorded yet")
            && results[0].contains("`review/summary.md` is not there"),
        "{results:?}"
    );
    assert!(
        results[2].contains("verdict recorded: approve"),
        "{results:?}"
    );
}
