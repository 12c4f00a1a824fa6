//! `Session::turn`'s modifiers with its terminals, over real HTTP to the scripted server: a
//! choice holds for the first model call only, a seed and a choice together on a stream,
//! and a seeded `ask` whose retry does not send the seed again.

use crate::common;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_event::EventKind;
use treadle_scripted::Reply;
use treadle_session::inference::ToolChoice;
use treadle_session::{FnTool, SeededCall, Tool, TurnItem};

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn add() -> impl Tool {
    FnTool::plain("add", "Adds.", |x: Add| x.a + x.b)
}

fn rules() -> SeededCall {
    SeededCall::new(
        "ctx_0",
        "read_file",
        json!({"path": "RULES.md"}),
        "always run go vet",
    )
}

/// The messages of a request's body that are the result of tool call `call_id`.
fn results_of(body: &Value, call_id: &str) -> usize {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .count()
}

#[tokio::test]
async fn a_choice_holds_for_the_turns_first_model_call_only() {
    let server = common::server([
        Reply::tool_call("add", json!({ "a": 2, "b": 3 })),
        Reply::text("five"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(add())
        .start()
        .await
        .expect("start");
    let answer = session
        .turn("2 + 3?")
        .choosing(ToolChoice::Named("add".into()))
        .answer()
        .await
        .expect("answer");
    assert_eq!(answer, "five");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["tool_choice"]["function"]["name"], "add");
    assert!(
        requests[1].body.get("tool_choice").is_none(),
        "the model chooses again: {}",
        requests[1].body
    );
    session.shutdown().await;
}

#[tokio::test]
async fn a_seeded_and_choosing_stream_yields_the_seed_step_then_the_answer() {
    let server = common::server([
        Reply::tool_call("add", json!({ "a": 1, "b": 1 })),
        Reply::text("Run go vet."),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(add())
        .start()
        .await
        .expect("start");
    let mut turn = session
        .turn("State the rule.")
        .seeded(vec![rules()])
        .choosing(ToolChoice::Required)
        .stream()
        .await
        .expect("stream");
    let (mut steps, mut report) = (Vec::new(), None);
    while let Some(item) = turn.next().await {
        match item.expect("item") {
            TurnItem::Event(event) => {
                if let EventKind::StepDone { index, model, .. } = &event.kind {
                    steps.push((*index, model.clone()));
                }
            }
            TurnItem::End(end) => report = Some(end),
        }
    }
    let report = report.expect("the stream ends with the report");
    assert_eq!(report.answer().expect("answer"), "Run go vet.");
    assert_eq!(report.steps, 2, "model calls only, not the seed's step");
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(
        steps[0],
        (0, String::new()),
        "the seed's step, with no model"
    );
    let requests = server.requests();
    assert_eq!(requests[0].body["tool_choice"], "required");
    assert_eq!(results_of(&requests[0].body, "ctx_0"), 1);
    assert!(requests[1].body.get("tool_choice").is_none());
    session.shutdown().await;
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Rule {
    rule: String,
}

#[tokio::test]
async fn a_seeded_ask_that_retries_sends_the_seed_once() {
    let server = common::server([
        Reply::text("The rule is to run go vet."),
        Reply::text(r#"{"rule": "run go vet"}"#),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .start()
        .await
        .expect("start");
    let rule: Rule = session
        .turn("State the rule.")
        .seeded(vec![rules()])
        .ask()
        .await
        .expect("ask");
    assert_eq!(rule.rule, "run go vet");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the answer, then its one retry");
    assert_eq!(results_of(&requests[0].body, "ctx_0"), 1);
    // The retry's history holds the first turn, seed included, and no second seed.
    assert_eq!(results_of(&requests[1].body, "ctx_0"), 1);
    let history = session.history().await.expect("history");
    let seeded = history
        .iter()
        .flat_map(|m| m.tool_uses())
        .filter(|u| u.id == "ctx_0")
        .count();
    assert_eq!(seeded, 1, "the seed is committed once");
    session.shutdown().await;
}
