//! How an effectful call's result reaches the journal: the result of a batch's last call to
//! finish shares the step's commit (one append, one log sync, `EffectResult` first), and
//! the result of a call that finishes while others still run is journaled at once, before
//! the batch ends.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_scripted::{Reply, ToolCall};
use treadle_session::{Effect, FnTool, Journal, JournalView, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Nap {
    ms: u64,
}

/// An effectful tool (the default effect) that sleeps `ms`, then answers "charged".
fn charge() -> FnTool<
    Nap,
    impl Fn(Nap) -> futures::future::BoxFuture<'static, Result<String, ToolError>>
    + Send
    + Sync
    + 'static,
> {
    FnTool::new("charge", "Charges, after a nap.", |a: Nap| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            Ok::<_, ToolError>("charged".to_owned())
        }) as futures::future::BoxFuture<'static, _>
    })
}

/// The names of the session's journaled events, with their seqs, in journal order.
fn journaled(journal: &JournalView, session: treadle_event::SessionId) -> Vec<(u64, String)> {
    journal
        .read(session, 0, None)
        .expect("read")
        .into_iter()
        .map(|(seq, e)| (seq, e.kind.name().to_owned()))
        .collect()
}

#[tokio::test]
async fn the_last_effect_result_is_journaled_in_the_step_commit() {
    let server = common::server([
        Reply::tool_call("charge", json!({ "ms": 5 })),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(charge())
        .start()
        .await
        .expect("start");
    assert!(
        session
            .turn("charge me")
            .run()
            .await
            .expect("run")
            .is_done()
    );
    let journal = session.journal().clone();
    let stats = journal.stats();
    let events = journaled(&journal, session.id());
    session.shutdown().await;

    let at = |name: &str| {
        events
            .iter()
            .find(|(_, n)| n == name)
            .map(|(seq, _)| *seq)
            .unwrap_or_else(|| panic!("{name} in {events:?}"))
    };
    let (intent, result, done) = (at("effect_intent"), at("effect_result"), at("step_done"));
    assert!(intent < result, "{events:?}");
    assert_eq!(
        result + 1,
        done,
        "the result right before its StepDone: {events:?}"
    );
    // session_started, turn_started, effect_intent, (effect_result + step_done),
    // step_done, turn_done: seven events in six appends, each its own batch (one sync).
    assert_eq!(events.len(), 7, "{events:?}");
    assert_eq!((stats.events, stats.appends, stats.batches), (7, 6, 6));
}

#[tokio::test]
async fn an_effect_result_is_journaled_at_once_while_other_calls_still_run() {
    #[derive(Deserialize, JsonSchema)]
    struct Wait {}
    let server = common::server([
        Reply::tool_calls([
            ToolCall::new("charge", json!({ "ms": 5 })),
            ToolCall::new("wait", json!({})),
        ]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let path: PathBuf = dir.path().join("j.redb");
    // What the long call finds journaled while it runs, well after `charge` returned.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let wait = {
        let (path, seen) = (path.clone(), Arc::clone(&seen));
        FnTool::new(
            "wait",
            "Waits, then looks at the journal.",
            move |_: Wait| {
                let (path, seen) = (path.clone(), Arc::clone(&seen));
                async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    // The session's own journal: a file is open once per process.
                    let journal = Journal::open(&path).map_err(|e| ToolError(e.to_string()))?;
                    let sessions = journal.sessions().map_err(|e| ToolError(e.to_string()))?;
                    let mut names = Vec::new();
                    for session in sessions {
                        names.extend(journaled(&journal, session).into_iter().map(|(_, n)| n));
                    }
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = names;
                    Ok::<_, ToolError>("waited".to_owned())
                }
            },
        )
        .effect(Effect::Pure)
    };
    let session = common::session(server.base_url(), &dir)
        .tool(charge())
        .tool(wait)
        .start()
        .await
        .expect("start");
    assert!(session.turn("go").run().await.expect("run").is_done());
    let events = journaled(session.journal(), session.id());
    session.shutdown().await;

    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        seen.iter().any(|n| n == "effect_result"),
        "charge's result was journaled while wait still ran: {seen:?}"
    );
    assert!(!seen.iter().any(|n| n == "step_done"), "{seen:?}");
    let names: Vec<&str> = events.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "session_started",
            "turn_started",
            "effect_intent",
            "effect_result",
            "step_done",
            "step_done",
            "turn_done"
        ]
    );
}
