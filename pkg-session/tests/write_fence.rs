//! A session's write fence (`SessionBuilder::fence`): once it refuses, nothing more of the
//! session is journaled, so a tool call the model asked for after that never runs, and the
//! turn's waiter is told the session is closed instead of waiting forever. And it is shown
//! each event once journaled and before the session acts on it (an effectful call's intent
//! before the call runs), which is how a worker mirrors a session elsewhere.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{FnTool, Refused, RunError, ToolError, WriteFence};

/// Admits appends until `open` is cleared.
#[derive(Debug)]
struct Switch {
    open: Arc<AtomicBool>,
    refused: AtomicUsize,
}

#[async_trait::async_trait]
impl WriteFence for Switch {
    async fn admit(&self) -> Result<(), Refused> {
        if self.open.load(Ordering::SeqCst) {
            Ok(())
        } else {
            self.refused.fetch_add(1, Ordering::SeqCst);
            Err(Refused("the lease went to another worker".to_owned()))
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
    let run = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        session.turn("mark it").run(),
    )
    .await
    .expect("the turn's waiter is not left waiting");
    assert!(matches!(run, Err(RunError::Closed)), "{run:?}");
    assert_eq!(marks.load(Ordering::SeqCst), 0, "the tool call never ran");
    assert!(fence.refused.load(Ordering::SeqCst) >= 1);
    assert_eq!(server.request_count(), 1, "no second model call");
    session.shutdown().await;
}

/// Admits everything, and keeps the name of each event it is shown as committed.
#[derive(Debug, Default)]
struct Mirror {
    seen: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl WriteFence for Mirror {
    async fn admit(&self) -> Result<(), Refused> {
        Ok(())
    }

    async fn committed(&self, event: &treadle_session::event::Event) -> Result<(), Refused> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(event.kind.name().to_owned());
        }
        Ok(())
    }
}

#[tokio::test]
async fn the_fence_is_shown_each_event_journaled_before_the_session_acts_on_it() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("mark", json!({})).usage(10, 2),
        Reply::text("marked").usage(10, 2),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fence = Arc::new(Mirror::default());
    let watching = fence.clone();
    let intent_first = Arc::new(AtomicBool::new(false));
    let checked = intent_first.clone();
    let session = common::session(server.base_url(), &dir)
        .tool(FnTool::new("mark", "Marks.", move |_: Mark| {
            // An effectful call: its intent must have been shown before it runs.
            let seen = watching.seen.lock().map(|s| s.clone()).unwrap_or_default();
            checked.store(
                seen.last().map(String::as_str) == Some("effect_intent"),
                Ordering::SeqCst,
            );
            async move { Ok::<_, ToolError>("marked".to_owned()) }
        }))
        .fence(fence.clone())
        .start()
        .await
        .unwrap();
    let report = session.turn("mark it").run().await.unwrap();
    assert!(
        intent_first.load(Ordering::SeqCst),
        "the intent was shown before the call ran"
    );
    let journaled: Vec<String> = session
        .journal()
        .read(session.id(), 0, None)
        .unwrap()
        .iter()
        .map(|(_, e)| e.kind.name().to_owned())
        .collect();
    let seen = fence.seen.lock().unwrap().clone();
    assert_eq!(seen, journaled, "every journaled event, in order");
    // The last turn's report, read back from the journal, is the one `run` gave.
    assert_eq!(session.last_turn().await.unwrap(), Some(report));
    session.shutdown().await;
}
