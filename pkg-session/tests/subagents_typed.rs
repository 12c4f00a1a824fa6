//! Sub-agents (delegation to another loop of the session) and typed output (`ask::<T>`).

use crate::common;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_event::{Block, EventFilter, EventKind};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{AskError, Session, StructuredOutput, SubAgent, TurnOutcome};

const CHILD_PROMPT: &str = "You are the child.";

fn is_child(body: &Value) -> bool {
    body["messages"][0]["content"] == CHILD_PROMPT
}

fn tool_results(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
        .unwrap_or(0)
}

async fn session_with_child(server: &ScriptedServer, dir: &tempfile::TempDir) -> Session {
    common::session(server.base_url(), dir)
        .sub_agent(
            SubAgent::new("helper", "Computes things.")
                .system_prompt(CHILD_PROMPT)
                .max_steps(3),
        )
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_answers_through_its_own_loop_and_is_charged_to_the_parent() {
    let server = ScriptedServer::start(Script::from_fn(|body| {
        if is_child(body) {
            Reply::text("child says 42").usage(5, 3)
        } else if tool_results(body) == 0 {
            Reply::tool_call("helper", json!({ "task": "compute the answer" })).usage(10, 2)
        } else {
            Reply::text("parent got it").usage(20, 4)
        }
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = session_with_child(&server, &dir).await;
    let mut events = session.subscribe(EventFilter::enduring_only());
    let report = session.turn("ask the helper").run().await.unwrap();
    assert_eq!(
        report.outcome,
        TurnOutcome::Done {
            text: "parent got it".into()
        }
    );
    // Parent's own tokens (10+2, 20+4) plus the child's (5+3).
    assert_eq!(
        (report.usage.prompt_tokens, report.usage.completion_tokens),
        (35, 9)
    );

    let history = session.history().await.unwrap();
    assert!(
        matches!(&history[2].content[0], Block::ToolResult { content, .. } if content == "child says 42"),
        "{history:?}"
    );

    let mut child_loops = Vec::new();
    while let Ok(Some(Ok(d))) =
        tokio::time::timeout(Duration::from_millis(300), events.next()).await
    {
        if d.event.header.loop_id != Some(session.main_loop())
            && matches!(d.event.kind, EventKind::TurnDone { .. })
        {
            child_loops.push(d.event.header.loop_id);
        }
    }
    assert_eq!(
        child_loops.len(),
        1,
        "the child's turn reached the same subscription under its own loop"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_the_parent_interrupts_the_child() {
    let server = ScriptedServer::start(Script::from_fn(|body| {
        if is_child(body) {
            Reply::text("thinking for a very long time").block_after(1)
        } else {
            Reply::tool_call("helper", json!({ "task": "take forever" }))
        }
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = session_with_child(&server, &dir).await;
    let mut events = session.subscribe(EventFilter::enduring_only());
    session.turn("go").submit().await.unwrap();
    assert!(
        server.wait_requests(2, Duration::from_secs(10)).await,
        "the child is streaming"
    );
    assert!(session.interrupt().await.unwrap());
    let mut interrupted = Vec::new();
    while interrupted.len() < 2 {
        let d = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("in time")
            .unwrap()
            .unwrap();
        if matches!(d.event.kind, EventKind::TurnInterrupted { .. }) {
            interrupted.push(d.event.header.loop_id);
        }
    }
    assert!(interrupted.contains(&Some(session.main_loop())));
    assert!(
        interrupted.iter().any(|l| *l != Some(session.main_loop())),
        "the child's turn was interrupted too"
    );
    session.shutdown().await;
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Verdict {
    approve: bool,
    reason: String,
}

#[tokio::test]
async fn ask_returns_a_typed_value_through_response_format() {
    let server = ScriptedServer::start(Script::new([Reply::text(
        r#"{"approve": true, "reason": "tests pass"}"#,
    )]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = common::session(server.base_url(), &dir)
        .start()
        .await
        .unwrap();
    let verdict: Verdict = session.turn("merge?").ask().await.unwrap();
    assert_eq!(
        verdict,
        Verdict {
            approve: true,
            reason: "tests pass".into()
        }
    );
    let body = &server.requests()[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert!(body["response_format"]["json_schema"]["schema"]["properties"]["approve"].is_object());
    session.shutdown().await;
}

#[tokio::test]
async fn an_unparsable_answer_is_retried_once_with_the_error_then_fails_typed() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("sure, approve it"),
        Reply::text(r#"{"approve": false, "reason": "second try"}"#),
        Reply::text("still not json"),
        Reply::text("nor this"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = common::session(server.base_url(), &dir)
        .start()
        .await
        .unwrap();
    let verdict: Verdict = session.turn("merge?").ask().await.unwrap();
    assert_eq!(verdict.reason, "second try");
    let retry = server.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(retry.contains("could not be read"), "{retry}");

    let failed = session.turn("again?").ask::<Verdict>().await;
    assert!(
        matches!(&failed, Err(AskError::Parse { answer, .. }) if answer == "nor this"),
        "{failed:?}"
    );
    session.shutdown().await;
}

#[tokio::test]
async fn ask_with_a_forced_reporting_tool() {
    let server = ScriptedServer::start(Script::new([Reply::tool_call(
        "report_answer",
        json!({ "approve": false, "reason": "no tests" }),
    )]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = common::session(server.base_url(), &dir)
        .structured_output(StructuredOutput::ForcedTool)
        .start()
        .await
        .unwrap();
    let verdict: Verdict = session.turn("merge?").ask().await.unwrap();
    assert_eq!(
        verdict,
        Verdict {
            approve: false,
            reason: "no tests".into()
        }
    );
    let body = &server.requests()[0].body;
    assert_eq!(body["tool_choice"]["function"]["name"], "report_answer");
    assert!(body.get("response_format").is_none());
    let history = session.history().await.unwrap();
    assert_eq!(
        history.len(),
        3,
        "input, the reporting call, its result: {history:?}"
    );
    session.shutdown().await;
}
