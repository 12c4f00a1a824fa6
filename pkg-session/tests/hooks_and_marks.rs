//! Hooks that can measure and see every journal append; the journaled restore mark; the
//! catch-up mark of `subscribe_from`. All against the scripted server on loopback.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use treadle_event::{EventFilter, EventKind, GateAnswer};
use treadle_hook::{Decision, Hook, HookCall, Operation, OperationId, OperationOutcome, Payload};
use treadle_scripted::Reply;
use treadle_session::hook::Policy;
use treadle_session::{CatchUpItem, FnTool};

/// What one begin or finish told the hook.
#[derive(Debug, Clone)]
struct Seen {
    op: Operation,
    id: OperationId,
    finish: bool,
    elapsed: Duration,
    appended: Vec<String>,
}

#[derive(Clone, Default)]
struct Meter(Arc<Mutex<Vec<Seen>>>);

impl Meter {
    fn push(&self, call: &HookCall, finish: bool) {
        let appended = match &call.payload {
            Payload::JournalAppend { events } => events.iter().map(|e| e.to_string()).collect(),
            _ => Vec::new(),
        };
        self.0.lock().unwrap().push(Seen {
            op: call.op,
            id: call.id,
            finish,
            elapsed: call.elapsed(),
            appended,
        });
    }
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

#[treadle_session::async_trait]
impl Hook for Meter {
    fn name(&self) -> &str {
        "meter"
    }
    async fn begin(&self, call: &HookCall) -> Decision {
        self.push(call, false);
        Decision::Allow
    }
    async fn finish(&self, call: &HookCall, _: &OperationOutcome, _: Option<&serde_json::Value>) {
        self.push(call, true);
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nap {
    ms: u64,
}

#[tokio::test]
async fn hooks_time_each_operation_and_see_every_journal_append() {
    let server = common::server([
        Reply::tool_call("nap", json!({ "ms": 60 })),
        Reply::text("rested"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let meter = Meter::default();
    let session = common::session(server.base_url(), &dir)
        .hook(meter.clone())
        .hook(Policy::new().ask("nap"))
        .on_gate(|_| async { GateAnswer::Approve })
        .tool(FnTool::new("nap", "Sleeps.", |a: Nap| async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            Ok::<_, treadle_session::ToolError>("slept")
        }))
        .start()
        .await
        .unwrap();
    assert!(session.turn("rest a bit").run().await.unwrap().is_done());
    let id = session.id();
    let journal = session.journal().clone();
    session.shutdown().await;

    let seen = meter.seen();
    // Each operation's begin and finish carry one id, no other operation has it, and the
    // finish knows how long it took.
    let begins: Vec<&Seen> = seen.iter().filter(|s| !s.finish).collect();
    let mut ids: Vec<OperationId> = begins.iter().map(|s| s.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), begins.len(), "operation ids are unique");
    for begin in &begins {
        let finishes = seen
            .iter()
            .filter(|s| s.finish && s.id == begin.id && s.op == begin.op)
            .count();
        assert_eq!(finishes, 1, "{begin:?} finished once under its id");
    }
    let nap = seen
        .iter()
        .find(|s| s.finish && s.op == Operation::ToolExecution)
        .expect("the tool ran");
    assert!(nap.elapsed >= Duration::from_millis(60), "{nap:?}");
    let turn = seen
        .iter()
        .find(|s| s.finish && s.op == Operation::Turn)
        .expect("the turn finished");
    assert!(turn.elapsed >= nap.elapsed, "{turn:?} contains {nap:?}");

    // Every event the journal holds passed the journal-append hook, in journal order.
    let hooked: Vec<String> = seen
        .iter()
        .filter(|s| s.finish && s.op == Operation::JournalAppend)
        .flat_map(|s| s.appended.clone())
        .collect();
    let journaled: Vec<String> = journal
        .read(id, 0, None)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.kind.name().to_owned())
        .collect();
    assert_eq!(hooked, journaled);
    for name in [
        "session_started",
        "turn_started",
        "gate_opened",
        "gate_resolved",
    ] {
        assert!(hooked.iter().any(|h| h == name), "{name} in {hooked:?}");
    }
    assert!(hooked.contains(&"turn_done".to_owned()));
    assert!(hooked.contains(&"session_stopped".to_owned()));
}

#[tokio::test]
async fn a_restore_is_journaled_and_subscribe_from_says_when_it_has_caught_up() {
    let server = common::server([Reply::text("first"), Reply::text("second")]).await;
    let dir = tempfile::tempdir().unwrap();
    let first = common::session(server.base_url(), &dir)
        .start()
        .await
        .unwrap();
    let id = first.id();
    assert!(first.turn("one").run().await.unwrap().is_done());
    first.shutdown().await;
    drop(first);
    let before = treadle_session::Journal::open(dir.path().join("j.redb"))
        .unwrap()
        .last_seq(id)
        .unwrap()
        .expect("journaled");

    let restored = common::session(server.base_url(), &dir)
        .restore(id)
        .await
        .unwrap();
    let mut journaled = restored
        .subscribe_from(1, EventFilter::enduring_only())
        .unwrap();
    let mut names = Vec::new();
    let caught_up = loop {
        match journaled.next().await.expect("an item").unwrap() {
            CatchUpItem::Event(d) => names.push(d.event.kind.clone()),
            CatchUpItem::CaughtUp { seq } => break seq,
        }
    };
    assert!(journaled.is_caught_up());
    // The restore's mark is the last journaled event, naming what the restore read.
    assert_eq!(caught_up, before + 1);
    assert_eq!(
        names.last(),
        Some(&EventKind::SessionRestored {
            through_seq: before
        })
    );
    assert!(matches!(names[0], EventKind::SessionStarted { .. }));
    // After the mark, live events.
    assert!(restored.turn("two").run().await.unwrap().is_done());
    let next = journaled.next().await.expect("live").unwrap();
    let live = next.delivery().expect("a delivery after the mark");
    assert!(live.journal_seq.unwrap() > caught_up);
    assert!(matches!(live.event.kind, EventKind::TurnStarted { .. }));
    restored.shutdown().await;
}
