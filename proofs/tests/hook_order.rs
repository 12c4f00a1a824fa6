//! Rule 5, hook-order: per step, hooks run step.begin → inference.begin → inference.finish →
//! (tool-call guards and tool-execution around-hooks) → step.commit → step.finish. A
//! discarded step's hooks finish Failed or Canceled, never Completed, and a guard that
//! denies a turn or an inference stops it with the reason in the terminal event.

use std::time::Duration;

use serde_json::json;
use treadle_event::{EventFilter, EventKind};
use treadle_hook::{Decision, Hook, HookCall, Operation, OperationOutcome, Phase, Recorder};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ToolCall};

/// The labels one committed step must produce, given its number of tool calls.
fn committed_step(calls: usize) -> Vec<String> {
    let mut labels = vec!["step.begin", "inference.begin", "inference.finish"];
    // Guards of every call run before any execution (authorization precedes running).
    labels.extend(std::iter::repeat_n("tool_call.begin", calls));
    labels.extend([
        "journal_append.begin",
        "journal_append.finish",
        "step.finish",
    ]);
    labels.into_iter().map(String::from).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_rule_order_for_every_step() {
    for seed in 0..SCHEDULES {
        let calls = 1 + (seed % 3) as usize;
        let batch: Vec<ToolCall> = (0..calls)
            .map(|i| ToolCall::new("echo", json!({ "i": i })))
            .collect();
        let script = Script::new([Reply::tool_calls(batch), Reply::text("done")]);
        let world = World::start(script, seed, Duration::from_micros(300)).await;
        let recorder = Recorder::new();
        let session = world
            .session()
            .hook(recorder.clone())
            .start()
            .await
            .expect("start");
        let report = session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");

        session.shutdown().await;
        // Appends outside any step (session start and stop, the turn's start and end) are
        // hooked too, each a begin immediately finished; rule 5 is about the step's.
        let records = recorder.records();
        let outside: Vec<String> = records
            .iter()
            .filter(|r| r.op == Operation::JournalAppend && r.step.is_none())
            .map(|r| r.label())
            .collect();
        let pair = ["journal_append.begin", "journal_append.finish"];
        assert_eq!(outside, pair.repeat(4), "seed {seed}: {records:?}");
        let labels: Vec<String> = records
            .iter()
            .filter(|r| !(r.op == Operation::JournalAppend && r.step.is_none()))
            .map(|r| r.label())
            .collect();
        assert_eq!(labels.first().map(String::as_str), Some("turn.begin"));
        assert_eq!(labels.last().map(String::as_str), Some("turn.finish"));
        let inner = &labels[1..labels.len() - 1];

        // Tool executions run in parallel, so their begin/finish pairs interleave; take
        // them out and check each call's own order, then check the rest exactly.
        let (tool_phase, skeleton): (Vec<_>, Vec<_>) = inner
            .iter()
            .enumerate()
            .partition(|(_, l)| l.starts_with("tool_execution.") || *l == "tool_call.finish");
        let mut expected = committed_step(calls);
        expected.extend(committed_step(0));
        let skeleton: Vec<String> = skeleton.into_iter().map(|(_, l)| l.clone()).collect();
        assert_eq!(skeleton, expected, "seed {seed}: {labels:?}");
        assert_eq!(tool_phase.len(), calls * 3, "seed {seed}");
        // Every tool-phase record sits between the last guard and the commit of step one.
        let last_guard = inner
            .iter()
            .rposition(|l| l == "tool_call.begin")
            .unwrap_or(0);
        let commit = inner
            .iter()
            .position(|l| l == "journal_append.begin")
            .unwrap_or(0);
        assert!(
            tool_phase
                .iter()
                .all(|(i, _)| *i > last_guard && *i < commit),
            "seed {seed}: {labels:?}"
        );
        // For each call: execution begins, execution finishes, then its guard finishes.
        for record in recorder
            .records()
            .iter()
            .filter(|r| r.phase == Phase::Finish)
        {
            assert_eq!(
                record.outcome,
                Some(OperationOutcome::Completed),
                "seed {seed}: {record:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_steps_hooks_never_finish_completed() {
    for seed in 0..SCHEDULES {
        let script = Script::new([
            Reply::tool_call("echo", json!({ "i": 0 })),
            Reply::text("cut short, never committed").cut_after(2),
        ]);
        let world = World::start(script, seed, Duration::from_micros(300)).await;
        let recorder = Recorder::new();
        let session = world
            .session()
            .hook(recorder.clone())
            .start()
            .await
            .expect("start");
        let report = session.turn("go").run().await.expect("run");
        assert!(!report.is_done(), "seed {seed}");
        let records = recorder.records();
        let second_step = records
            .iter()
            .filter(|r| r.op == Operation::Step && r.phase == Phase::Begin)
            .nth(1)
            .and_then(|r| r.step)
            .expect("a second step");
        let finishes: Vec<_> = records
            .iter()
            .filter(|r| r.step == Some(second_step) && r.phase == Phase::Finish)
            .collect();
        assert!(!finishes.is_empty(), "seed {seed}");
        for record in finishes {
            assert!(
                matches!(
                    record.outcome,
                    Some(OperationOutcome::Failed { .. } | OperationOutcome::Canceled)
                ),
                "seed {seed}: {record:?}"
            );
        }
        assert!(
            !records
                .iter()
                .any(|r| r.step == Some(second_step) && r.op == Operation::JournalAppend),
            "seed {seed}: a discarded step never reaches step.commit"
        );
        // The last record of the turn's own operations (the terminal's append follows).
        let turn_finish = records
            .iter()
            .rfind(|r| r.op != Operation::JournalAppend)
            .expect("records");
        assert_eq!(
            (turn_finish.op, turn_finish.phase),
            (Operation::Turn, Phase::Finish)
        );
        assert!(
            matches!(turn_finish.outcome, Some(OperationOutcome::Failed { .. })),
            "seed {seed}"
        );
        session.shutdown().await;
    }
}

/// Denies one operation with a fixed reason.
struct DenyOp(Operation, &'static str);

#[async_trait::async_trait]
impl Hook for DenyOp {
    fn name(&self) -> &str {
        "deny-op"
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        if call.op == self.0 {
            Decision::deny(self.1)
        } else {
            Decision::Allow
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denying_guard_stops_the_turn_or_inference_with_its_reason() {
    for (op, reason) in [
        (Operation::Turn, "turns are closed today"),
        (Operation::Inference, "no model calls on Sundays"),
    ] {
        let world =
            World::start(Script::new([Reply::text("never asked")]), 1, Duration::ZERO).await;
        let recorder = Recorder::new();
        let session = world
            .session()
            .hook(recorder.clone())
            .hook(DenyOp(op, reason))
            .start()
            .await
            .expect("start");
        let mut sub = session.subscribe(EventFilter::enduring_only());
        session.turn("go").submit().await.expect("submit");
        let deliveries = until_terminal(&mut sub).await;
        let Some(EventKind::TurnFailed { error, .. }) = deliveries.last().map(|d| &d.event.kind)
        else {
            panic!("{op:?}: expected TurnFailed, got {:?}", names(&deliveries));
        };
        assert!(error.contains(reason), "{op:?}: {error}");
        assert_eq!(
            world.server.request_count(),
            0,
            "{op:?}: the model was never called"
        );
        assert!(
            !deliveries
                .iter()
                .any(|d| matches!(d.event.kind, EventKind::StepDone { .. }))
        );
        // The recorder (registered first) saw the denied operation finish with Denied.
        let denied = recorder
            .records()
            .into_iter()
            .find(|r| r.op == op && r.phase == Phase::Finish)
            .expect("finish");
        assert_eq!(
            denied.outcome,
            Some(OperationOutcome::denied(reason)),
            "{op:?}"
        );
        session.shutdown().await;
    }
}
