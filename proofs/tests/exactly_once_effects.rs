//! exactly-once-effects (rule 11): an effectful call that a crash caught between its
//! journaled intent and its result is never run again by a restore unless the answer to its
//! `effect` gate says so; a call whose result is journaled is not run again at all.
//!
//! A child process (`treadle-effect-child`) runs a session whose model asks for
//! `[echo, charge]`; `charge` is effectful and appends a line to a log file per execution
//! (15 ms after it starts, then it takes 80 ms more), so executions are counted across
//! processes. Once the child reports the intent, the parent waits a seeded random 0–60 ms and
//! kills it with SIGKILL: before or after the effect itself, always (checked in the journal)
//! before its result. The session is restored in this process; the parked step resumes
//! without asking the model again, and the `effect` gate is answered in turn: skip with a
//! result, run again, fail the turn, or left to the session's `skip` policy. The log then
//! holds exactly the runs the answer allowed.

use std::time::Duration;

use serde_json::{Value, json};
use treadle_event::{Event, EventFilter, EventKind, GateAnswer, SessionId};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{EffectPolicy, GateKind, GateQuestion, Journal, Session};

/// Kills that must land between an intent and its result.
const KILLS: usize = 52;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// Answer with a value: the call is not run; the model reads the value.
    Skip,
    /// Approve: the call runs once more.
    RunAgain,
    /// Deny: the turn fails; the call is not run.
    Fail,
    /// The session's policy is `skip`: the gate is answered at restore, nobody asked.
    PolicySkip,
}

const VARIANTS: [Variant; 4] = [
    Variant::Skip,
    Variant::RunAgain,
    Variant::Fail,
    Variant::PolicySkip,
];

fn script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if messages.iter().any(|m| m["role"] == "tool") {
            return Reply::text("done");
        }
        Reply::text("charging. ").with_tool_calls(vec![
            ToolCall::new("echo", json!({ "i": 1 })),
            ToolCall::new("charge", json!({ "amount": 5 })),
        ])
    })
}

fn count(events: &[Event], name: &str) -> usize {
    events.iter().filter(|e| e.kind.name() == name).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_interrupted_by_a_crash_runs_again_only_when_the_answer_says_so() {
    let child_bin = env!("CARGO_BIN_EXE_treadle-effect-child");
    let mut rng = rng(11);
    let (mut between, mut runs, mut before_effect) = (0, 0u64, 0);
    while between < KILLS {
        runs += 1;
        assert!(runs < 120, "too few kills landed between intent and result");
        let variant = VARIANTS[between % VARIANTS.len()];
        let server = ScriptedServer::builder()
            .start(script())
            .await
            .expect("server");
        let dir = tempfile::tempdir().expect("dir");
        let mut child = ChildSession::spawn(child_bin, &server, dir.path(), "charges.log", &[]);
        let (journal_path, log, session) =
            (child.journal.clone(), child.log.clone(), child.session);
        assert_eq!(child.next_line(), "intent");
        let delay = pick(&mut rng, 0..60);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        child.kill();

        let before = journaled(&Journal::open(&journal_path).expect("reopen"), session);
        let ran_before = lines_in(&log);
        assert!(
            ran_before <= 1,
            "run {runs}: ran {ran_before} times before the crash"
        );
        if count(&before, "effect_result") > 0 {
            // The kill came after the result (a slow machine): not a point this proof
            // counts, but a restore must still not run it again.
            let restored = restore(&server, &journal_path, &log, EffectPolicy::Ask, session).await;
            let mut sub = restored
                .subscribe_from(0, EventFilter::enduring_only())
                .expect("subscribe")
                .into_subscription();
            until_terminal(&mut sub).await;
            assert_eq!(
                lines_in(&log),
                1,
                "run {runs}: a journaled result is not rerun"
            );
            restored.shutdown().await;
            continue;
        }
        assert_eq!(count(&before, "effect_intent"), 1, "run {runs}: one intent");
        between += 1;
        if ran_before == 0 {
            before_effect += 1;
        }

        let policy = match variant {
            Variant::PolicySkip => EffectPolicy::Skip,
            _ => EffectPolicy::Ask,
        };
        let restored = restore(&server, &journal_path, &log, policy, session).await;
        let mut sub = restored
            .subscribe_from(0, EventFilter::enduring_only())
            .expect("subscribe")
            .into_subscription();
        let opened: Vec<GateQuestion> = journaled(restored.journal(), session)
            .iter()
            .filter_map(GateQuestion::from_event)
            .collect();
        assert_eq!(opened.len(), 1, "run {runs}: one effect gate");
        assert_eq!(opened[0].kind, GateKind::Effect, "run {runs}");
        assert_eq!(opened[0].tool, "charge", "run {runs}");
        let gate = opened[0].gate;
        let answer = match variant {
            Variant::Skip => Some(GateAnswer::Answer {
                value: json!("charge checked by hand"),
            }),
            Variant::RunAgain => Some(GateAnswer::Approve),
            Variant::Fail => Some(GateAnswer::deny("charges need a person")),
            Variant::PolicySkip => None,
        };
        if let Some(answer) = answer {
            restored
                .respond_gate(gate, answer)
                .await
                .unwrap_or_else(|e| panic!("run {runs}: answer the effect gate: {e}"));
        }
        let delivered = until_terminal(&mut sub).await;
        let terminal = &delivered.last().expect("a terminal").event.kind;

        let expected_runs = ran_before + usize::from(variant == Variant::RunAgain);
        assert_eq!(
            lines_in(&log),
            expected_runs,
            "run {runs} {variant:?} (killed {delay} ms after the intent): executions"
        );
        match variant {
            Variant::Fail => assert!(
                matches!(terminal, EventKind::TurnFailed { error, .. } if error == "charges need a person"),
                "run {runs}: {terminal:?}"
            ),
            _ => {
                assert!(
                    matches!(terminal, EventKind::TurnDone { text, .. } if text == "done"),
                    "run {runs} {variant:?}: {terminal:?}"
                );
                let results = results_read_by_model(&server);
                let charge = match variant {
                    Variant::Skip => "charge checked by hand",
                    Variant::RunAgain => "charged 5",
                    _ => EffectPolicy::SKIPPED,
                };
                assert_eq!(results, ["1", charge], "run {runs} {variant:?}");
                // The parked step was not asked of the model again.
                assert_eq!(server.requests().len(), 2, "run {runs}: inference skipped");
            }
        }
        let after = journaled(restored.journal(), session);
        assert_eq!(count(&after, "gate_opened"), 1, "run {runs}: asked once");
        assert_eq!(
            count(&after, "gate_resolved"),
            1,
            "run {runs}: answered once"
        );
        assert_eq!(
            after.iter().filter(|e| e.kind.terminal().is_some()).count(),
            1,
            "run {runs}: one terminal"
        );
        restored.shutdown().await;
    }
    eprintln!(
        "exactly-once-effects: {between} kills between intent and result ({before_effect} \
         before the effect itself) in {runs} runs"
    );
    assert!(
        before_effect > 0 && before_effect < between,
        "both sides of the effect"
    );
}

async fn restore(
    server: &ScriptedServer,
    journal: &std::path::Path,
    log: &std::path::Path,
    policy: EffectPolicy,
    session: SessionId,
) -> Session {
    Session::builder()
        .endpoint(server.base_url())
        .model("scripted")
        .journal_path(journal)
        .unfinished_effects(policy)
        .tool(echo_tool(0))
        .tool(charge_tool(
            log.to_owned(),
            Duration::from_millis(1),
            Duration::from_millis(1),
        ))
        .restore(session)
        .await
        .expect("restore")
}

/// The effect gate refuses an answer it does not take, and stays open for one it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_gate_refuses_approve_always_and_stays_open() {
    let child_bin = env!("CARGO_BIN_EXE_treadle-effect-child");
    let server = ScriptedServer::builder()
        .start(script())
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let mut child = ChildSession::spawn(child_bin, &server, dir.path(), "charges.log", &[]);
    let (journal_path, log, session) = (child.journal.clone(), child.log.clone(), child.session);
    assert_eq!(child.next_line(), "intent");
    child.kill();

    let restored = restore(&server, &journal_path, &log, EffectPolicy::Ask, session).await;
    let gate = journaled(restored.journal(), session)
        .iter()
        .find_map(GateQuestion::from_event)
        .expect("an effect gate")
        .gate;
    let refused = restored.respond_gate(gate, GateAnswer::ApproveAlways).await;
    assert!(
        matches!(&refused, Err(treadle_session::GateError::Refused { reason, .. }) if reason.contains("run it again")),
        "{refused:?}"
    );
    let report_sub = restored.subscribe_from(0, EventFilter::enduring_only());
    let mut sub = report_sub.expect("subscribe").into_subscription();
    restored
        .respond_gate(gate, GateAnswer::Answer { value: json!("ok") })
        .await
        .expect("a value answers it");
    let delivered = until_terminal(&mut sub).await;
    assert!(matches!(
        delivered.last().expect("terminal").event.kind,
        EventKind::TurnDone { .. }
    ));
    assert!(lines_in(&log) <= 1, "never run again");
    restored.shutdown().await;
}
