//! Robustness against small models, end to end against the scripted server: malformed tool
//! arguments repaired, a model stuck repeating one call nudged then stopped, and a
//! turn-ending tool that lets the model say one more thing and no more.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_event::{Block, FailureCause, Role};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{Session, SessionBuilder, Tool, ToolError, TurnOutcome};

#[derive(Deserialize, JsonSchema)]
struct Write {
    path: String,
    content: String,
}

/// A `write` tool that remembers what it was called with.
fn write_tool(
    seen: Arc<Mutex<Vec<(String, String)>>>,
) -> treadle_session::FnTool<
    Write,
    impl Fn(Write) -> futures::future::Ready<Result<String, ToolError>> + Send + Sync + 'static,
> {
    treadle_session::FnTool::new("write", "Writes a file.", move |a: Write| {
        let bytes = a.content.len();
        seen.lock().unwrap().push((a.path.clone(), a.content));
        futures::future::ready(Ok::<_, ToolError>(format!(
            "wrote {bytes} bytes to {}",
            a.path
        )))
    })
}

fn builder(url: &str, dir: &tempfile::TempDir) -> SessionBuilder {
    Session::builder()
        .endpoint(url)
        .model("scripted")
        .journal_path(dir.path().join("j.redb"))
}

/// The arguments of every tool call the session sent back to the model in `body`.
fn sent_arguments(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["function"]["arguments"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn malformed_arguments_are_repaired_and_the_history_holds_valid_json() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([
            ToolCall::raw(
                "write",
                "```json\n{'path': 'a.md', content: 'one\ntwo',}\n```",
            ),
            // Beyond repair: the model is told, as before.
            ToolCall::raw("write", "{\"path\": a.md}"),
        ]),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let session = builder(server.base_url(), &dir)
        .tool(write_tool(seen.clone()))
        .start()
        .await
        .unwrap();
    let report = session.turn("write it").run().await.unwrap();
    assert!(report.is_done(), "{:?}", report.outcome);
    assert_eq!(
        *seen.lock().unwrap(),
        [("a.md".to_owned(), "one\ntwo".to_owned())]
    );
    let history = session.history().await.unwrap();
    let results: Vec<(String, bool)> = history[2]
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("wrote 7 bytes to a.md".to_owned(), false));
    assert!(
        results[1].1 && results[1].0.contains("not valid JSON"),
        "{results:?}"
    );
    // The second request carries the repaired call as valid JSON.
    let requests = server.requests();
    let args = sent_arguments(&requests[1].body);
    let repaired: Value = serde_json::from_str(&args[0]).unwrap();
    assert_eq!(repaired, json!({"path": "a.md", "content": "one\ntwo"}));
    session.shutdown().await;
}

#[tokio::test]
async fn a_model_repeating_one_call_is_nudged_then_stopped() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    // The stuck model: the same call, forever.
    let server = ScriptedServer::start(Script::from_fn(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Reply::tool_call("write", json!({"path": "a.md", "content": "x"}))
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let session = builder(server.base_url(), &dir)
        .tool(write_tool(seen.clone()))
        .repeat_limit(2)
        .start()
        .await
        .unwrap();
    let report = session.turn("write it").run().await.unwrap();
    match &report.outcome {
        TurnOutcome::Failed { error, failure, .. } => {
            assert_eq!(*failure, FailureCause::Repeated);
            assert!(
                error.contains("stuck in a loop") && error.contains("write"),
                "{error}"
            );
        }
        other => panic!("expected a loop failure, got {other:?}"),
    }
    // Two copies allowed, the third nudged, the fourth ends the turn.
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(seen.lock().unwrap().len(), 4);
    let requests = server.requests();
    let last = requests[3].body["messages"].as_array().unwrap().clone();
    let nudge = last
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        nudge.contains("3 times") && nudge.contains("will not change"),
        "{nudge}"
    );
    // The stuck step is committed: the history ends with its results, valid for a next turn.
    let history = session.history().await.unwrap();
    assert_eq!(history.last().map(|m| m.role), Some(Role::Tool));
    session.shutdown().await;
}

/// A tool whose successful call ends the turn, like a pipeline's verdict.
struct Decide;

#[async_trait::async_trait]
impl Tool for Decide {
    fn name(&self) -> &str {
        "decide"
    }
    fn description(&self) -> &str {
        "Records the decision."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"choice": {"type": "string", "enum": ["yes", "no"]}}, "required": ["choice"]})
    }
    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        Ok(format!("recorded {}", arguments["choice"]))
    }
    fn ends_turn(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_turn_ending_tool_allows_one_more_model_call() {
    // After the decision the model goes on calling tools: the next call is the last one,
    // its tool calls are not run, and the turn ends with its text.
    let server = ScriptedServer::start(Script::from_fn(|body| {
        let tools = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        match tools {
            0 => Reply::tool_call("decide", json!({"choice": "maybe"})),
            1 => Reply::tool_call("decide", json!({"choice": "yes"})),
            _ => Reply::text("Approved.").with_tool_calls([ToolCall::new(
                "write",
                json!({"path": "a.md", "content": "x"}),
            )]),
        }
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let session = builder(server.base_url(), &dir)
        .tool(write_tool(seen.clone()))
        .tool(Decide)
        .start()
        .await
        .unwrap();
    let report = session.turn("decide").run().await.unwrap();
    assert_eq!(
        report.outcome,
        TurnOutcome::Done {
            text: "Approved.".into()
        }
    );
    // A refused decision (not in the enum) does not end the turn; the valid one does,
    // after exactly one more model call.
    assert_eq!(server.request_count(), 3);
    assert!(
        seen.lock().unwrap().is_empty(),
        "no call runs after the decision"
    );
    let history = session.history().await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.role, Role::Tool);
    assert!(matches!(
        &last.content[0],
        Block::ToolResult { content, is_error: true, .. } if content.contains("turn was over")
    ));
    // The session goes on: a next turn runs normally (and may decide again).
    session.shutdown().await;
}

#[tokio::test]
async fn a_call_written_as_text_is_made() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("```json\n{\"name\": \"write\", \"arguments\": {\"path\": \"a.md\", \"content\": \"hi\"}}\n```"),
        // An answer that only mentions a call stays an answer.
        Reply::text("I called {\"name\": \"write\"} for you."),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let session = builder(server.base_url(), &dir)
        .tool(write_tool(seen.clone()))
        .start()
        .await
        .unwrap();
    let report = session.turn("write it").run().await.unwrap();
    assert_eq!(
        report.outcome,
        TurnOutcome::Done {
            text: "I called {\"name\": \"write\"} for you.".into()
        }
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [("a.md".to_owned(), "hi".to_owned())]
    );
    // The model is sent its call back as a call, not as text.
    let requests = server.requests();
    assert_eq!(sent_arguments(&requests[1].body).len(), 1);
    session.shutdown().await;
}
