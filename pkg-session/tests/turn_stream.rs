//! `TurnRequest::stream`: one turn's events, then its report; a failed turn is an error, not an
//! answer.

use crate::common;

use serde_json::json;
use treadle_event::{DeltaKind, EventKind, FailureCause};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{FnTool, TurnError, TurnItem};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::test]
async fn a_turn_streams_its_events_then_ends_with_its_report() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("add", json!({ "a": 2, "b": 3 })),
        Reply::text("five"),
    ]))
    .await
    .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(FnTool::plain("add", "Adds.", |x: Add| x.a + x.b))
        .start()
        .await
        .expect("start");
    let mut turn = session.turn("2 + 3?").stream().await.expect("stream");
    let (mut text, mut kinds, mut report) = (String::new(), Vec::new(), None);
    while let Some(item) = turn.next().await {
        match item.expect("item") {
            TurnItem::Event(event) => {
                assert_eq!(
                    event.header.cause,
                    Some(treadle_event::Cause::Input(turn.input()))
                );
                if let EventKind::TokenDelta {
                    kind: DeltaKind::Text,
                    text: piece,
                    ..
                } = &event.kind
                {
                    text.push_str(piece);
                }
                if let EventKind::ToolCallCompleted { content, .. } = &event.kind {
                    assert_eq!(content, "5", "a plain function's result, serialized");
                }
                kinds.push(event.kind.name());
            }
            TurnItem::End(end) => report = Some(end),
        }
    }
    let report = report.expect("the stream ends with the report");
    assert_eq!(report.answer().expect("answer"), "five");
    assert_eq!(report.answer().ok(), Some("five"));
    assert_eq!(text, "five");
    for kind in [
        "turn_started",
        "tool_call_started",
        "tool_call_completed",
        "step_done",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert!(turn.next().await.is_none(), "nothing after the end");
    session.shutdown().await;
}

#[tokio::test]
async fn a_failed_turn_has_no_text_and_its_answer_is_an_error() {
    let server = ScriptedServer::start(Script::new([Reply::status(400)]))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .start()
        .await
        .expect("start");
    let report = session.turn("hi").run().await.expect("report");
    assert_eq!(report.answer().ok(), None);
    let error = report.answer().expect_err("a failed turn is an error");
    assert!(
        matches!(
            &error,
            TurnError::Failed {
                failure: FailureCause::Model,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("400"), "{error}");
    session.shutdown().await;
}
