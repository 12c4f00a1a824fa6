//! A session's write fence (`SessionBuilder::fence`): once it refuses, nothing more of the
//! session is journaled, so a tool call the model asked for after that never runs, and the
//! turn's waiter is told the session is closed instead of waiting forever.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{FnTool, RunError, ToolError, WriteFence};

/// Admits appends until `open` is cleared.
#[derive(Debug)]
struct Switch {
    open: Arc<AtomicBool>,
    refused: AtomicUsize,
}

#[async_trait::async_trait]
impl WriteFence for Switch {
    async fn admit(&self) -> Result<(), String> {
        if self.open.load(Ordering::SeqCst) {
            Ok(())
        } else {
            self.refused.fetch_add(1, Ordering::SeqCst);
            Err("the lease went to another worker".to_owned())
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct Mark {}

#[tokio::test]
async fn a_refused_fence_stops_the_session_before_its_next_effect() {
    // The fence closes as the model is asked: the step that answers (a tool call) is the
    // first append it refuses.
    let open = Arc::new(AtomicBool::new(true));
    let closer = open.clone();
    let server = ScriptedServer::start(Script::from_fn(move |_| {
        closer.store(false, Ordering::SeqCst);
        Reply::tool_call("mark", json!({})).usage(10, 2)
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marks = Arc::new(AtomicUsize::new(0));
    let counted = marks.clone();
    let fence = Arc::new(Switch {
        open,
        refused: AtomicUsize::new(0),
    });
    let session = common::session(server.base_url(), &dir)
        .tool(FnTool::new("mark", "Marks.", move |_: Mark| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("marked".to_owned())
            }
        }))
        .fence(fence.clone())
        .start()
        .await
        .unwrap();
    let run = tokio::time::timeout(std::time::Duration::from_secs(20), session.run("mark it"))
        .await
        .expect("the turn's waiter is not left waiting");
    assert!(matches!(run, Err(RunError::Closed)), "{run:?}");
    assert_eq!(marks.load(Ordering::SeqCst), 0, "the tool call never ran");
    assert!(fence.refused.load(Ordering::SeqCst) >= 1);
    assert_eq!(server.request_count(), 1, "no second model call");
    session.shutdown().await;
}
