//! Long conversations against the scripted server: the history is summarised past its
//! budget (keeping the newest step and its tool call intact), hooks see the compaction,
//! the journal holds it so a restore sees the compacted history, and one tool result's
//! inline size is capped.

use std::sync::atomic::{AtomicU32, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use treadle_event::{Block, Role};
use treadle_hook::{Operation, Phase, Recorder};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{FnTool, Session, SessionBuilder, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Read {
    n: u32,
}

fn builder(url: &str, dir: &tempfile::TempDir) -> SessionBuilder {
    Session::builder()
        .endpoint(url)
        .model("scripted")
        .journal_path(dir.path().join("j.redb"))
        .tool(FnTool::new("read", "Reads part n.", |a: Read| async move {
            // 400 bytes: 100 estimated tokens.
            Ok::<_, ToolError>(format!("part {} ", a.n).repeat(60)[..400].to_owned())
        }))
}

/// Whether `body` is a summary request (no tools offered, the summariser's instructions).
fn is_summary(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("summarise the earlier part"))
}

/// Reads parts 0..4, one call per model request, then answers; summary requests (which do
/// not count) get a summary.
fn script() -> Script {
    let asked = AtomicU32::new(0);
    Script::from_fn(move |body| {
        if is_summary(body) {
            return Reply::text("The assistant read parts 0 and 1; both were filler.");
        }
        match asked.fetch_add(1, Ordering::SeqCst) {
            n @ 0..4 => Reply::tool_call("read", json!({ "n": n })),
            _ => Reply::text("done"),
        }
    })
}

#[tokio::test]
async fn a_long_turn_is_compacted_and_restore_sees_the_compacted_history() {
    let server = ScriptedServer::start(script()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new();
    let session = builder(server.base_url(), &dir)
        .compact_after_tokens(250)
        .hook(recorder.clone())
        .start()
        .await
        .unwrap();
    let report = session.turn("read the parts").run().await.unwrap();
    assert!(report.is_done(), "{:?}", report.outcome);

    let requests = server.requests();
    let summaries: Vec<usize> = (0..requests.len())
        .filter(|&i| is_summary(&requests[i].body))
        .collect();
    assert!(!summaries.is_empty(), "a summary was asked for");
    // The summariser was sent the older messages, not the tools.
    let first = &requests[summaries[0]].body;
    assert!(
        first
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty))
    );
    // The request after the summary starts from it and keeps the newest call with its result.
    let next = &requests[summaries[0] + 1].body;
    let messages = next["messages"].as_array().unwrap();
    let texts: Vec<String> = messages
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("summarised to save space") && t.contains("parts 0 and 1")),
        "{next}"
    );
    let last_call = messages
        .iter()
        .rposition(|m| m["tool_calls"].is_array())
        .unwrap();
    assert_eq!(
        messages[last_call + 1]["role"],
        "tool",
        "the call keeps its result"
    );

    // Hooks saw it.
    let compactions: Vec<_> = recorder
        .records()
        .into_iter()
        .filter(|r| r.op == Operation::Compaction)
        .collect();
    assert!(compactions.len() >= 2, "{compactions:?}");
    assert_eq!(compactions[0].phase, Phase::Begin);

    // The committed history is the compacted one, and a restore rebuilds exactly it.
    let live = session.history().await.unwrap();
    assert!(live[0].text_content().contains("summarised to save space"));
    assert!(live.len() < 2 + 2 * 4, "{} messages", live.len());
    let id = session.id();
    session.shutdown().await;
    drop(session);
    let restored = builder(server.base_url(), &dir).restore(id).await.unwrap();
    assert_eq!(restored.history().await.unwrap(), live);
    restored.shutdown().await;
}

#[tokio::test]
async fn a_long_tool_result_is_cut_with_a_note() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read", json!({"n": 7})),
        Reply::text("ok"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = builder(server.base_url(), &dir)
        .max_tool_result_bytes(50)
        .start()
        .await
        .unwrap();
    assert!(session.turn("read").run().await.unwrap().is_done());
    let history = session.history().await.unwrap();
    let result = history
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.starts_with("part 7 part 7"), "{result}");
    assert!(
        result.contains("350 more bytes of this result were cut"),
        "{result}"
    );
    assert!(result.len() < 200);
    session.shutdown().await;
}
