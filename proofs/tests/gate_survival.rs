//! gate-survival: a permission gate opened before a crash is open again after restore, under
//! its original id, and can be answered; an approved call then runs exactly once, a denied
//! one never runs and the model reads the reason, and a gate whose deadline passed while
//! the process was down has expired (rule 7: fail closed), never approved late.
//!
//! A child process (`treadle-gate-child`) runs a session whose policy asks about `write`; its
//! `write` appends a line to a log file, so executions are counted across processes. The
//! model asks for a batch `[echo, write a.md]` (or `[echo, write a.md, write b.md]`, where
//! the child answers the first gate itself before the crash). Once the child prints the open
//! gate, it is killed with SIGKILL and the session is restored in this process with the same
//! policy and tools. The parked turn resumes at its batch without asking the model again:
//! the server sees exactly one more request, the final one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_event::{Event, EventFilter, EventKind, GateAnswer, GateId};
use treadle_hook::Policy;
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{GateError, Journal, Session};

/// How many crash-and-restore runs, cycling through the variants.
const RUNS: u64 = 24;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// Approve the reopened gate: the call runs exactly once.
    Approve,
    /// Deny it: the call never runs and the model reads the reason.
    Deny,
    /// Its deadline passes during the downtime: expired at restore, never runs.
    Expired,
    /// Two writes; the child approved the first gate before the crash. After restore the
    /// first call takes the journaled answer (no new gate), the second waits on its
    /// reopened gate: approving it runs each call exactly once.
    ApprovedBefore,
}

const VARIANTS: [Variant; 4] = [
    Variant::Approve,
    Variant::Deny,
    Variant::Expired,
    Variant::ApprovedBefore,
];

/// The first step asks for the batch; once the model has read tool results, it answers.
fn script(writes: usize) -> Script {
    Script::from_fn(move |body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if messages.iter().any(|m| m["role"] == "tool") {
            return Reply::text("done");
        }
        let mut calls = vec![ToolCall::new("echo", json!({ "i": 1 }))];
        for w in 0..writes {
            let path = if w == 0 { "a.md" } else { "b.md" };
            calls.push(ToolCall::new("write", json!({ "path": path })));
        }
        Reply::text("writing. ").with_tool_calls(calls)
    })
}

fn resolutions(events: &[Event], gate: GateId) -> Vec<GateAnswer> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GateResolved { gate: g, answer } if *g == gate => Some(answer.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_open_at_a_crash_is_answered_after_restore_and_the_call_runs_once() {
    let child_bin = env!("CARGO_BIN_EXE_treadle-gate-child");
    for run in 0..RUNS {
        let variant = VARIANTS[(run % VARIANTS.len() as u64) as usize];
        let writes = if variant == Variant::ApprovedBefore {
            2
        } else {
            1
        };
        let deadline_ms: u64 = if variant == Variant::Expired {
            300
        } else {
            60_000
        };
        let server = ScriptedServer::builder()
            .jitter(Duration::ZERO, Duration::from_millis(1), run)
            .start(script(writes))
            .await
            .expect("server");
        let dir = tempfile::tempdir().expect("dir");
        let deadline = deadline_ms.to_string();
        let approved_before = if variant == Variant::ApprovedBefore {
            "1"
        } else {
            "0"
        };
        let mut child = ChildSession::spawn(
            child_bin,
            &server,
            dir.path(),
            "writes.log",
            &[&deadline, approved_before],
        );
        let (journal_path, log, session) =
            (child.journal.clone(), child.log.clone(), child.session);
        let gate: GateId = child
            .next_line()
            .strip_prefix("gate ")
            .expect("gate line")
            .parse()
            .expect("gate id");
        let gate_seen = Instant::now();
        child.kill();

        // Before restore: the gate is open in the journal and no write ran (every guard of a
        // batch resolves before any call of it executes).
        assert_eq!(
            lines_in(&log),
            0,
            "run {run}: nothing ran before the answer"
        );
        let before = journaled(&Journal::open(&journal_path).expect("reopen"), session);
        let opened = before
            .iter()
            .find(|e| matches!(&e.kind, EventKind::GateOpened { gate: g, .. } if *g == gate))
            .expect("the gate is journaled");
        let (turn, step) = (
            opened.header.turn.expect("turn"),
            opened.header.step.expect("step"),
        );
        let EventKind::GateOpened { subject, .. } = &opened.kind else {
            unreachable!("matched above");
        };
        let staged = subject["resume"]["message"].clone();
        assert!(
            resolutions(&before, gate).is_empty(),
            "run {run}: gate open"
        );

        if variant == Variant::Expired {
            // Let the recorded deadline pass while nothing runs.
            let wait = Duration::from_millis(deadline_ms + 150).saturating_sub(gate_seen.elapsed());
            tokio::time::sleep(wait).await;
        }

        let restored = Session::builder()
            .endpoint(server.base_url())
            .model("scripted")
            .journal_path(&journal_path)
            .hook(Policy::new().allow("echo").ask("write"))
            .tool(echo_tool(run))
            .tool(line_counting_write(log.clone()))
            .restore(session)
            .await
            .expect("restore");
        // Catch up from the start, so the resumed turn's end cannot slip past.
        let mut sub = restored
            .subscribe_from(0, EventFilter::enduring_only())
            .expect("subscribe")
            .into_subscription();

        let reason = format!("not today ({run})");
        let answered = match variant {
            Variant::Approve | Variant::ApprovedBefore => {
                restored.respond_gate(gate, GateAnswer::Approve).await
            }
            Variant::Deny => {
                restored
                    .respond_gate(gate, GateAnswer::deny(reason.clone()))
                    .await
            }
            Variant::Expired => restored.respond_gate(gate, GateAnswer::Approve).await,
        };
        if variant == Variant::Expired {
            assert!(
                matches!(answered, Err(GateError::NotOpen(g)) if g == gate),
                "run {run}: an expired gate cannot be approved late: {answered:?}"
            );
        } else {
            answered.unwrap_or_else(|e| panic!("run {run}: the old gate id answers: {e}"));
        }

        let delivered = until_terminal(&mut sub).await;
        let terminal = delivered.last().expect("a terminal");
        assert_eq!(terminal.event.header.turn, Some(turn), "run {run}");
        assert!(
            matches!(&terminal.event.kind, EventKind::TurnDone { text, .. } if text == "done"),
            "run {run} {variant:?}: {:?}",
            names(&delivered)
        );

        let expected_runs = match variant {
            Variant::Approve => 1,
            Variant::ApprovedBefore => 2,
            Variant::Deny | Variant::Expired => 0,
        };
        assert_eq!(
            lines_in(&log),
            expected_runs,
            "run {run} {variant:?}: writes executed"
        );

        let results = results_read_by_model(&server);
        assert_eq!(results.len(), 1 + writes, "run {run}: one result per call");
        let write_result = &results[results.len() - 1];
        match variant {
            Variant::Approve => assert_eq!(write_result, "wrote a.md", "run {run}"),
            Variant::ApprovedBefore => {
                assert_eq!(results[1..], ["wrote a.md", "wrote b.md"], "run {run}")
            }
            Variant::Deny => assert_eq!(*write_result, format!("denied: {reason}"), "run {run}"),
            Variant::Expired => assert_eq!(
                write_result, "denied: no answer before the deadline",
                "run {run}"
            ),
        }
        // The parked step was not asked of the model again: one request before the crash,
        // one (the final answer) after.
        assert_eq!(server.requests().len(), 2, "run {run}: inference skipped");

        let after = journaled(restored.journal(), session);
        let terminals: Vec<_> = after
            .iter()
            .filter(|e| e.kind.terminal().is_some())
            .collect();
        assert_eq!(terminals.len(), 1, "run {run}: one terminal in all");
        assert_eq!(terminals[0].header.turn, Some(turn), "run {run}");
        let expected_answer = match variant {
            Variant::Approve | Variant::ApprovedBefore => GateAnswer::Approve,
            Variant::Deny => GateAnswer::Deny {
                reason: reason.clone(),
            },
            Variant::Expired => GateAnswer::Expired,
        };
        assert_eq!(
            resolutions(&after, gate),
            vec![expected_answer],
            "run {run}: one GateResolved for the gate"
        );
        let opened_gates = after
            .iter()
            .filter(|e| matches!(e.kind, EventKind::GateOpened { .. }))
            .count();
        assert_eq!(opened_gates, writes, "run {run}: no gate was asked twice");
        // The parked step committed once, under its own id, with the staged message.
        let commits: Vec<_> = after
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::StepDone { messages, .. } if e.header.step == Some(step) => {
                    Some(messages)
                }
                _ => None,
            })
            .collect();
        assert_eq!(commits.len(), 1, "run {run}: the parked step commits once");
        assert_eq!(
            serde_json::to_value(&commits[0][0]).expect("json"),
            staged,
            "run {run}: the committed assistant message is the staged one"
        );
        assert_eq!(
            restored.history().await.expect("history"),
            history_from_journal(restored.journal(), session),
            "run {run}: history is the journal's"
        );
        restored.shutdown().await;
    }
}

/// An `ApproveAlways` given before a stop still holds after restore: the next `write` runs
/// without opening a gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_always_survives_a_restore() {
    let script = Script::new(vec![
        Reply::tool_call("write", json!({ "path": "a.md" })),
        Reply::text("first done"),
        Reply::tool_call("write", json!({ "path": "b.md" })),
        Reply::text("second done"),
    ]);
    let world = World::start(script, 7, Duration::from_micros(300)).await;
    let log = world.dir.path().join("writes.log");
    let builder = || {
        Session::builder()
            .endpoint(world.server.base_url())
            .model("scripted")
            .journal_path(world.journal_path())
            .hook(Policy::new().ask("write"))
            // Short, so a lost approval fails the proof (the call expires) instead of hanging.
            .gate_deadline(Duration::from_secs(3))
            .tool(line_counting_write(log.clone()))
    };
    let session = builder().start().await.expect("start");
    let mut sub = session.subscribe(EventFilter::enduring_only());
    let answerer = session.clone();
    let answering = tokio::spawn(async move {
        while let Some(Ok(delivery)) = futures::StreamExt::next(&mut sub).await {
            if let EventKind::GateOpened { gate, .. } = delivery.event.kind {
                answerer
                    .respond_gate(gate, GateAnswer::ApproveAlways)
                    .await
                    .expect("respond");
            }
        }
    });
    assert!(session.turn("first").run().await.expect("run").is_done());
    session.shutdown().await;
    answering.await.expect("answerer");
    let id = session.id();
    drop(session);

    let restored = builder().restore(id).await.expect("restore");
    let report = restored.turn("second").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    assert_eq!(lines_in(&log), 2);
    let opened = journaled(restored.journal(), id)
        .iter()
        .filter(|e| matches!(e.kind, EventKind::GateOpened { .. }))
        .count();
    assert_eq!(opened, 1, "the restored approval covers the second call");
    restored.shutdown().await;
}
