//! A session against a real small model (scripts/local-model): one obvious tool, then text.
//!
//! The test is `#[ignore]`d, so a plain `cargo test` on a machine with no model lists it as
//! ignored (visibly skipped, never silently green). `scripts/test` (the README's test
//! command, and CI) starts the local model and runs it with `--include-ignored`.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_event::{DeltaKind, EventFilter, EventKind};
use treadle_session::{FnTool, Session, ToolError, TurnOutcome};

#[derive(Deserialize, JsonSchema)]
struct ReadFile {
    /// Path of the file to read.
    path: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real model: scripts/test runs it"]
async fn a_real_model_calls_the_obvious_tool_then_answers() {
    let endpoint =
        std::env::var("TREADLE_LOCAL_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder()
        .endpoint(&endpoint)
        .model("qwen2.5-coder-0.5b")
        .temperature(0.0)
        .max_steps(4)
        .journal_path(dir.path().join("j.redb"))
        .tool(FnTool::new(
            "read_file",
            "Read a text file from the workspace and return its contents.",
            |a: ReadFile| async move {
                if a.path.trim_start_matches("./") == "notes.txt" {
                    Ok("Buy milk. The meeting moved to Thursday at 10:00.".to_owned())
                } else {
                    Err(ToolError::new(format!(
                        "no file {:?}; the workspace has notes.txt",
                        a.path
                    )))
                }
            },
        ))
        .start()
        .await
        .unwrap();
    let mut events = session.subscribe(EventFilter::all());
    let run = session
        .turn("Read the file notes.txt and tell me what it says.")
        .run();
    let report = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the model answered in time")
        .unwrap();

    let mut deltas = 0;
    let mut tools = Vec::new();
    while let Ok(Some(Ok(d))) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        match &d.event.kind {
            EventKind::TokenDelta {
                kind: DeltaKind::Text | DeltaKind::ToolArguments,
                ..
            } => deltas += 1,
            EventKind::ToolCallCompleted { name, is_error, .. } => {
                tools.push((name.clone(), *is_error))
            }
            _ => {}
        }
    }
    let TurnOutcome::Done { text } = &report.outcome else {
        panic!("{report:?}")
    };
    eprintln!(
        "real model answered in {} steps ({} tokens): {text}",
        report.steps,
        report.usage.total()
    );
    assert!(deltas > 0, "the answer streamed");
    assert_eq!(
        tools.first(),
        Some(&("read_file".to_owned(), false)),
        "the model read the file: {tools:?}"
    );
    assert!(report.steps >= 2, "a tool step and a text step");
    let lower = text.to_lowercase();
    assert!(
        lower.contains("milk") || lower.contains("thursday"),
        "the answer uses the file: {text}"
    );
    assert!(report.usage.prompt_tokens > 0, "usage was reported");
    session.shutdown().await;
}
