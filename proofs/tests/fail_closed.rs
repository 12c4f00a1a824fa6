//! Rule 7, fail-closed: when a permission cannot be decided (a guard that asks in a headless
//! session, no answer before the gate's deadline, a policy with no rule and no default) the
//! call is not executed, and the model reads a denial that says why. Also: an approval runs
//! the call exactly once, a denial's reason reaches the model, `ApproveAlways` stops the
//! next call of that tool from asking, and an interrupt ends a wait without running the call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use treadle_event::{Event, EventFilter, EventKind, GateAnswer, GateId};
use treadle_hook::{Action, Policy, Recorder};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script};
use treadle_session::{FnTool, Session, SessionBuilder, ToolError};

/// Arguments of the counted `write` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    path: String,
}

/// A `write` tool that counts its executions and sleeps 0–2 ms (seeded) before answering.
fn counted_write(seed: u64, runs: Arc<AtomicUsize>) -> impl treadle_session::Tool {
    let delay = Duration::from_micros(seed * 37 % 2000);
    FnTool::new("write", "Writes a file.", move |args: WriteArgs| {
        let runs = runs.clone();
        async move {
            tokio::time::sleep(delay).await;
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(format!("wrote {}", args.path))
        }
    })
}

/// One `write` call per step for `calls` steps, then a final text answer.
fn writes(calls: usize) -> Script {
    let mut replies: Vec<Reply> = (0..calls)
        .map(|i| Reply::tool_call("write", json!({ "path": format!("f{i}.md") })))
        .collect();
    replies.push(Reply::text("done"));
    Script::new(replies)
}

struct Case {
    world: World,
    session: Session,
    runs: Arc<AtomicUsize>,
}

async fn case(
    seed: u64,
    calls: usize,
    configure: impl FnOnce(SessionBuilder) -> SessionBuilder,
) -> Case {
    let world = World::start(writes(calls), seed, Duration::from_micros(400)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let builder = Session::builder()
        .endpoint(world.server.base_url())
        .model("scripted")
        .journal_path(world.journal_path())
        .tool(counted_write(seed, runs.clone()));
    let session = configure(builder).start().await.expect("start");
    Case {
        world,
        session,
        runs,
    }
}

fn journal(session: &Session) -> Vec<Event> {
    session
        .journal()
        .read(session.id(), 0, None)
        .expect("read journal")
        .into_iter()
        .map(|(_, event)| event)
        .collect()
}

fn gates_opened(events: &[Event]) -> Vec<GateId> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GateOpened { gate, .. } => Some(*gate),
            _ => None,
        })
        .collect()
}

fn answers(events: &[Event]) -> Vec<GateAnswer> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GateResolved { answer, .. } => Some(answer.clone()),
            _ => None,
        })
        .collect()
}

/// Answers every gate the session opens with `response`, until the subscription ends.
fn answer_gates(session: &Session, response: GateAnswer) -> tokio::task::JoinHandle<usize> {
    let mut sub = session.subscribe(EventFilter::enduring_only());
    let session = session.clone();
    tokio::spawn(async move {
        let mut answered = 0;
        while let Some(Ok(delivery)) = sub.next().await {
            if let EventKind::GateOpened { gate, .. } = delivery.event.kind {
                session
                    .respond_gate(gate, response.clone())
                    .await
                    .expect("respond");
                answered += 1;
            }
        }
        answered
    })
}

/// A policy whose only rule asks about `write`.
fn asks_about_write() -> Policy {
    Policy::new().ask("write")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_in_a_headless_session_is_denied_without_running_or_opening_a_gate() {
    for seed in 0..SCHEDULES {
        let c = case(seed, 1, |b| b.hook(asks_about_write()).headless(true)).await;
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(
            c.runs.load(Ordering::SeqCst),
            0,
            "seed {seed}: the call ran"
        );
        let read = results_read_by_model(&c.world.server);
        assert_eq!(read.len(), 1, "seed {seed}");
        assert!(
            read[0].starts_with("denied: approval_required"),
            "seed {seed}: {read:?}"
        );
        assert!(gates_opened(&journal(&c.session)).is_empty(), "seed {seed}");
        c.session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_nobody_answers_denies_at_its_deadline() {
    for seed in 0..SCHEDULES {
        let deadline = Duration::from_millis(20 + seed % 20);
        let c = case(seed, 1, |b| {
            b.hook(asks_about_write()).gate_deadline(deadline)
        })
        .await;
        // Someone watches (so the gate opens) but never answers.
        let _watcher = c.session.subscribe(EventFilter::enduring_only());
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(
            c.runs.load(Ordering::SeqCst),
            0,
            "seed {seed}: the call ran"
        );
        assert_eq!(
            results_read_by_model(&c.world.server),
            vec!["denied: no answer before the deadline".to_owned()],
            "seed {seed}"
        );
        let events = journal(&c.session);
        assert_eq!(gates_opened(&events).len(), 1, "seed {seed}");
        assert_eq!(answers(&events), vec![GateAnswer::Expired], "seed {seed}");
        // An answer after the deadline is refused: the gate is closed.
        let gate = gates_opened(&events)[0];
        assert!(
            c.session
                .respond_gate(gate, GateAnswer::Approve)
                .await
                .is_err(),
            "seed {seed}"
        );
        assert_eq!(c.runs.load(Ordering::SeqCst), 0, "seed {seed}");
        c.session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_cannot_decide_denies() {
    for seed in 0..SCHEDULES {
        // Rules for other tools only, and no default: nothing decides about `write`.
        let policy = Policy::new().allow("read_*").deny("shell", "no shell");
        let c = case(seed, 1, |b| b.hook(policy)).await;
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(
            c.runs.load(Ordering::SeqCst),
            0,
            "seed {seed}: the call ran"
        );
        let read = results_read_by_model(&c.world.server);
        assert!(
            read.len() == 1 && read[0].starts_with("denied: ") && read[0].contains("fail closed"),
            "seed {seed}: {read:?}"
        );
        c.session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_exactly_once_inside_gate_wait_hooks() {
    for seed in 0..SCHEDULES {
        let recorder = Recorder::new();
        let c = case(seed, 1, |b| {
            b.hook(recorder.clone()).hook(asks_about_write())
        })
        .await;
        let answering = answer_gates(&c.session, GateAnswer::Approve);
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(c.runs.load(Ordering::SeqCst), 1, "seed {seed}");
        assert_eq!(
            results_read_by_model(&c.world.server),
            vec!["wrote f0.md".to_owned()],
            "seed {seed}"
        );
        assert_eq!(answers(&journal(&c.session)), vec![GateAnswer::Approve]);
        // The wait is bracketed by gate_wait hooks, inside the call's guard, before it runs.
        let labels = recorder.labels();
        let at = |label: &str| labels.iter().position(|l| l == label);
        let order = [
            at("tool_call.begin"),
            at("gate_wait.begin"),
            at("gate_wait.finish"),
            at("tool_execution.begin"),
        ];
        assert!(
            order.iter().all(Option::is_some) && order.windows(2).all(|w| w[0] < w[1]),
            "seed {seed}: {labels:?}"
        );
        c.session.shutdown().await;
        assert_eq!(answering.await.expect("answerer"), 1, "seed {seed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_gate_gives_the_model_the_reason() {
    for seed in 0..SCHEDULES {
        let c = case(seed, 1, |b| b.hook(asks_about_write())).await;
        let reason = format!("not today ({seed})");
        let answering = answer_gates(&c.session, GateAnswer::deny(reason.clone()));
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(c.runs.load(Ordering::SeqCst), 0, "seed {seed}");
        assert_eq!(
            results_read_by_model(&c.world.server),
            vec![format!("denied: {reason}")],
            "seed {seed}"
        );
        c.session.shutdown().await;
        answering.await.expect("answerer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_always_stops_later_calls_of_the_tool_from_asking() {
    for seed in 0..SCHEDULES {
        let calls = 2 + (seed % 2) as usize;
        let c = case(seed, calls, |b| {
            b.hook(Policy::new().default_action(Action::Ask))
        })
        .await;
        let answering = answer_gates(&c.session, GateAnswer::ApproveAlways);
        let report = c.session.turn("go").run().await.expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(c.runs.load(Ordering::SeqCst), calls, "seed {seed}");
        let events = journal(&c.session);
        assert_eq!(gates_opened(&events).len(), 1, "seed {seed}: asked again");
        assert_eq!(answers(&events), vec![GateAnswer::ApproveAlways]);
        // The journal alone rebuilds the remembered approval (what restore relies on).
        let rebuilt = treadle_session::Approvals::from_events(&events);
        assert_eq!(rebuilt.tools(), vec!["write".to_owned()], "seed {seed}");
        c.session.shutdown().await;
        assert_eq!(answering.await.expect("answerer"), 1, "seed {seed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_gate_wait_without_running_the_call() {
    for seed in 0..SCHEDULES {
        let c = case(seed, 1, |b| b.hook(asks_about_write())).await;
        let mut sub = c.session.subscribe(EventFilter::enduring_only());
        c.session.turn("go").submit().await.expect("submit");
        let mut saw_gate = false;
        let deliveries = {
            let mut out = Vec::new();
            while let Some(next) = tokio::time::timeout(PATIENCE, sub.next())
                .await
                .expect("no hang")
            {
                let delivery = next.expect("not lost");
                if matches!(delivery.event.kind, EventKind::GateOpened { .. }) && !saw_gate {
                    saw_gate = true;
                    tokio::time::sleep(Duration::from_micros(seed * 20)).await;
                    assert!(c.session.interrupt().await.expect("interrupt"));
                }
                let terminal = delivery.event.kind.terminal().is_some();
                out.push(delivery);
                if terminal {
                    break;
                }
            }
            out
        };
        assert!(saw_gate, "seed {seed}: {:?}", names(&deliveries));
        let kinds = names(&deliveries);
        assert_eq!(
            &kinds[kinds.len() - 2..],
            ["gate_resolved", "turn_interrupted"],
            "seed {seed}: the gate closes before the terminal"
        );
        assert_eq!(c.runs.load(Ordering::SeqCst), 0, "seed {seed}");
        let events = journal(&c.session);
        assert!(
            matches!(answers(&events).as_slice(), [GateAnswer::Deny { reason }] if reason.starts_with("canceled")),
            "seed {seed}"
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.kind, EventKind::StepDone { .. })),
            "seed {seed}: the interrupted step is discarded"
        );
        c.session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_nobody_can_answer_denies_at_once_without_waiting_for_the_deadline() {
    for seed in 0..SCHEDULES {
        // A long deadline: the turn must not wait for it.
        let c = case(seed, 1, |b| {
            b.hook(asks_about_write())
                .gate_deadline(Duration::from_secs(600))
        })
        .await;
        let report = tokio::time::timeout(PATIENCE, c.session.turn("go").run())
            .await
            .expect("no wait for the deadline")
            .expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        assert_eq!(
            c.runs.load(Ordering::SeqCst),
            0,
            "seed {seed}: the call ran"
        );
        let read = results_read_by_model(&c.world.server);
        assert!(
            read.len() == 1 && read[0].starts_with("denied: approval_required"),
            "seed {seed}: {read:?}"
        );
        assert!(
            read[0].contains("no on_gate handler and no subscriber"),
            "{read:?}"
        );
        assert!(gates_opened(&journal(&c.session)).is_empty(), "seed {seed}");
        c.session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_gate_handler_answers_each_gate_once_and_its_answer_is_journaled_first() {
    for seed in 0..SCHEDULES {
        let approve = seed % 2 == 0;
        let c = case(seed, 2, |b| {
            b.hook(asks_about_write())
                .on_gate(move |request| async move {
                    assert_eq!(request.tool, "write");
                    assert!(request.arguments["path"].is_string());
                    if approve {
                        GateAnswer::Approve
                    } else {
                        GateAnswer::deny("not today")
                    }
                })
        })
        .await;
        let report = tokio::time::timeout(PATIENCE, c.session.turn("go").run())
            .await
            .expect("the handler answers")
            .expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");
        let events = journal(&c.session);
        assert_eq!(gates_opened(&events).len(), 2, "seed {seed}");
        let expected = if approve {
            GateAnswer::Approve
        } else {
            GateAnswer::deny("not today")
        };
        assert_eq!(
            answers(&events),
            vec![expected.clone(), expected],
            "seed {seed}"
        );
        let ran = c.runs.load(Ordering::SeqCst);
        assert_eq!(ran, if approve { 2 } else { 0 }, "seed {seed}");
        c.session.shutdown().await;
    }
}
