//! Ordering, denial, outputs and encoding of the hook runner.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use treadle_event::{GateId, LoopId, SessionId, StepId, TurnId};
use treadle_hook::{
    Decision, DenyTools, Hook, HookCall, HookRunner, Operation, OperationOutcome, Payload, Phase,
    Record, Recorder, async_trait,
};

/// One line of the shared trace: `(hook, phase, outcome, output)`.
type Line = (
    String,
    &'static str,
    Option<OperationOutcome>,
    Option<Value>,
);

/// A hook that logs into a trace shared with other hooks, and denies every op it is told to.
struct Probe {
    name: &'static str,
    deny: Option<Operation>,
    trace: Arc<Mutex<Vec<Line>>>,
}

impl Probe {
    fn new(name: &'static str, trace: &Arc<Mutex<Vec<Line>>>) -> Arc<Self> {
        Self::denying(name, None, trace)
    }

    fn denying(
        name: &'static str,
        deny: Option<Operation>,
        trace: &Arc<Mutex<Vec<Line>>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            deny,
            trace: Arc::clone(trace),
        })
    }

    fn log(&self, line: Line) {
        self.trace.lock().expect("trace lock").push(line);
    }
}

#[async_trait]
impl Hook for Probe {
    fn name(&self) -> &str {
        self.name
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        self.log((self.name.to_owned(), "begin", None, None));
        if self.deny == Some(call.op) {
            Decision::deny(format!("{} says no", self.name))
        } else {
            Decision::Allow
        }
    }

    async fn finish(&self, _call: &HookCall, outcome: &OperationOutcome, output: Option<&Value>) {
        self.log((
            self.name.to_owned(),
            "finish",
            Some(outcome.clone()),
            output.cloned(),
        ));
    }
}

fn trace() -> Arc<Mutex<Vec<Line>>> {
    Arc::default()
}

fn lines(trace: &Arc<Mutex<Vec<Line>>>) -> Vec<(String, &'static str)> {
    trace
        .lock()
        .expect("trace lock")
        .iter()
        .map(|(hook, phase, _, _)| (hook.clone(), *phase))
        .collect()
}

fn pairs(expected: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    expected
        .iter()
        .map(|(h, p)| ((*h).to_owned(), *p))
        .collect()
}

fn call(payload: Payload) -> HookCall {
    HookCall::new(SessionId::new(), LoopId::new(), payload)
}

fn tool_call(name: &str) -> HookCall {
    call(Payload::ToolCall {
        call_id: "c1".into(),
        name: name.into(),
        arguments: json!({ "path": "a.txt" }),
    })
}

fn inference() -> HookCall {
    call(Payload::Inference {
        model: "local/tiny".into(),
        request: json!({ "messages": [] }),
    })
}

fn runner(hooks: &[Arc<Probe>]) -> HookRunner {
    HookRunner::new(
        hooks
            .iter()
            .map(|h| Arc::clone(h) as Arc<dyn Hook>)
            .collect(),
    )
}

#[tokio::test]
async fn begin_in_registration_order_finish_in_reverse() {
    let t = trace();
    let runner = runner(&[
        Probe::new("a", &t),
        Probe::new("b", &t),
        Probe::new("c", &t),
    ]);
    assert_eq!(runner.len(), 3);
    assert_eq!(runner.names().collect::<Vec<_>>(), ["a", "b", "c"]);

    let active = runner.begin(inference()).await.expect("allowed");
    assert_eq!(active.call().op, Operation::Inference);
    active.finish(OperationOutcome::Completed, None).await;

    assert_eq!(
        lines(&t),
        pairs(&[
            ("a", "begin"),
            ("b", "begin"),
            ("c", "begin"),
            ("c", "finish"),
            ("b", "finish"),
            ("a", "finish"),
        ])
    );
}

#[tokio::test]
async fn deny_on_guard_finishes_begun_hooks_in_reverse_and_names_the_hook() {
    for op in [Operation::Turn, Operation::Inference, Operation::ToolCall] {
        assert!(op.is_guard());
        let t = trace();
        let runner = runner(&[
            Probe::new("a", &t),
            Probe::denying("b", Some(op), &t),
            Probe::new("c", &t),
        ]);
        let payload = match op {
            Operation::Turn => Payload::Turn {
                index: 0,
                input: "hi".into(),
            },
            Operation::Inference => inference().payload,
            _ => tool_call("read").payload,
        };

        let denied = runner.begin(call(payload)).await.expect_err("denied");
        assert_eq!(denied.hook, "b");
        assert_eq!(denied.reason, "b says no");
        assert_eq!(denied.to_string(), "denied by hook b: b says no");

        // `c` never began, so it never finishes either.
        assert_eq!(
            lines(&t),
            pairs(&[
                ("a", "begin"),
                ("b", "begin"),
                ("b", "finish"),
                ("a", "finish")
            ])
        );
        let recorded = t.lock().expect("trace lock").clone();
        for (_, phase, outcome, output) in recorded {
            if phase == "finish" {
                assert_eq!(outcome, Some(OperationOutcome::denied("b says no")));
                assert_eq!(output, None);
            }
        }
    }
}

#[tokio::test]
async fn deny_on_non_guard_is_ignored() {
    for op in [
        Operation::Step,
        Operation::ToolExecution,
        Operation::GateWait,
        Operation::JournalAppend,
    ] {
        assert!(!op.is_guard());
        let t = trace();
        let runner = runner(&[Probe::denying("a", Some(op), &t), Probe::new("b", &t)]);
        let payload = match op {
            Operation::Step => Payload::Step { index: 0 },
            Operation::ToolExecution => Payload::ToolExecution {
                call_id: "c1".into(),
                name: "read".into(),
                arguments: json!({}),
            },
            Operation::GateWait => Payload::GateWait {
                gate: GateId::new(),
                question: "run it?".into(),
            },
            _ => Payload::JournalAppend {
                events: vec!["step_done".into()],
            },
        };
        let active = runner.begin(call(payload)).await.expect("deny ignored");
        active.finish(OperationOutcome::Completed, None).await;
        assert_eq!(
            lines(&t),
            pairs(&[
                ("a", "begin"),
                ("b", "begin"),
                ("b", "finish"),
                ("a", "finish")
            ])
        );
    }
}

#[tokio::test]
async fn outputs_and_outcomes_reach_finish() {
    let t = trace();
    let runner = runner(&[Probe::new("a", &t), Probe::new("b", &t)]);
    let answer = json!({ "role": "assistant", "content": "done" });

    let active = runner.begin(inference()).await.expect("allowed");
    active
        .finish(OperationOutcome::Completed, Some(answer.clone()))
        .await;
    let active = runner.begin(inference()).await.expect("allowed");
    active
        .finish(OperationOutcome::failed("stream cut"), None)
        .await;

    let finishes: Vec<(Option<OperationOutcome>, Option<Value>)> = t
        .lock()
        .expect("trace lock")
        .iter()
        .filter(|line| line.1 == "finish")
        .map(|line| (line.2.clone(), line.3.clone()))
        .collect();
    assert_eq!(
        finishes,
        [
            (Some(OperationOutcome::Completed), Some(answer.clone())),
            (Some(OperationOutcome::Completed), Some(answer)),
            (Some(OperationOutcome::failed("stream cut")), None),
            (Some(OperationOutcome::failed("stream cut")), None),
        ]
    );
}

#[tokio::test]
async fn observe_runs_begin_then_finish_and_ignores_decisions() {
    let t = trace();
    let runner = runner(&[
        Probe::denying("a", Some(Operation::ToolCall), &t),
        Probe::new("b", &t),
    ]);
    runner
        .observe(
            tool_call("read"),
            OperationOutcome::Completed,
            Some(json!("ok")),
        )
        .await;
    assert_eq!(
        lines(&t),
        pairs(&[
            ("a", "begin"),
            ("b", "begin"),
            ("b", "finish"),
            ("a", "finish")
        ])
    );
}

#[tokio::test]
async fn recorder_records_phases_outcomes_and_tool_names() {
    let recorder = Recorder::new();
    let runner = HookRunner::new(vec![
        Arc::new(recorder.clone()),
        Arc::new(DenyTools::new(["shell"], "no shell")),
    ]);
    let (turn, step) = (TurnId::new(), StepId::new());

    let step_call = call(Payload::Step { index: 0 })
        .with_turn(turn)
        .with_step(step);
    let step_active = runner.begin(step_call).await.expect("allowed");
    let denied = runner
        .begin(tool_call("shell").with_turn(turn).with_step(step))
        .await
        .expect_err("shell is denied");
    assert_eq!(denied.hook, "deny_tools");
    assert_eq!(denied.reason, "no shell");
    step_active.finish(OperationOutcome::Canceled, None).await;

    assert_eq!(
        recorder.labels(),
        [
            "step.begin",
            "tool_call.begin",
            "tool_call.finish",
            "step.finish"
        ]
    );
    let records = recorder.records();
    assert_eq!(
        records[1],
        Record {
            op: Operation::ToolCall,
            phase: Phase::Begin,
            outcome: None,
            turn: Some(turn),
            step: Some(step),
            name: Some("shell".into()),
        }
    );
    assert_eq!(
        records[2].outcome,
        Some(OperationOutcome::denied("no shell"))
    );
    assert_eq!(records[3].outcome, Some(OperationOutcome::Canceled));
    assert_eq!(records[3].name, None);

    recorder.clear();
    assert!(recorder.records().is_empty());
}

#[tokio::test]
async fn deny_tools_allows_other_tools_and_other_ops() {
    let runner = HookRunner::new(vec![Arc::new(DenyTools::new(["shell"], "no shell"))]);
    let active = runner.begin(tool_call("read")).await.expect("allowed");
    active.finish(OperationOutcome::Completed, None).await;
    // A tool *execution* is not where tools are authorized.
    let exec = call(Payload::ToolExecution {
        call_id: "c1".into(),
        name: "shell".into(),
        arguments: json!({}),
    });
    let active = runner.begin(exec).await.expect("not a tool call");
    active.finish(OperationOutcome::Completed, None).await;
}

#[tokio::test]
async fn empty_runner_is_a_pass_through() {
    let runner = HookRunner::default();
    assert!(runner.is_empty());
    assert_eq!(runner.len(), 0);
    let active = runner.begin(tool_call("shell")).await.expect("no hooks");
    assert_eq!(active.call().payload.tool_name(), Some("shell"));
    active.finish(OperationOutcome::Completed, None).await;
    runner
        .observe(inference(), OperationOutcome::Completed, None)
        .await;
}

#[test]
fn payload_and_call_serialize_with_tags() {
    let payload = tool_call("read").payload;
    assert_eq!(
        serde_json::to_value(&payload).expect("encode"),
        json!({ "kind": "tool_call", "call_id": "c1", "name": "read", "arguments": { "path": "a.txt" } })
    );
    let journal = Payload::JournalAppend {
        events: vec!["step_done".into()],
    };
    assert_eq!(
        serde_json::to_value(&journal).expect("encode"),
        json!({ "kind": "journal_append", "events": ["step_done"] })
    );

    let call = tool_call("read");
    let value = serde_json::to_value(&call).expect("encode");
    assert_eq!(value["op"], "tool_call");
    assert_eq!(value["loop"], json!(call.loop_id));
    assert_eq!(value["payload"]["kind"], "tool_call");
    assert!(
        value.get("turn").is_none(),
        "absent coordinates are omitted"
    );
    let back: HookCall = serde_json::from_value(value).expect("decode");
    assert_eq!(back, call);

    assert_eq!(
        serde_json::to_value(OperationOutcome::denied("no")).expect("encode"),
        json!({ "status": "denied", "reason": "no" })
    );
    for op in Operation::ALL {
        assert_eq!(serde_json::to_value(op).expect("encode"), json!(op.name()));
    }
}

#[test]
fn runner_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let runner = HookRunner::default();
    let begin = runner.begin(tool_call("read"));
    assert_send(&begin);
    let observe = runner.observe(inference(), OperationOutcome::Canceled, None);
    assert_send(&observe);
}

#[tokio::test]
async fn dropping_an_active_reports_but_does_not_panic() {
    let recorder = Recorder::new();
    let runner = HookRunner::new(vec![Arc::new(recorder.clone())]);
    let active = runner.begin(inference()).await.expect("allowed");
    // A caller bug: debug builds print a line on stderr; nothing panics, nothing finishes.
    drop(active);
    assert_eq!(recorder.labels(), ["inference.begin"]);
}

/// A guard that asks about every tool call.
struct Asker(&'static str);

#[async_trait]
impl Hook for Asker {
    fn name(&self) -> &str {
        self.0
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        if call.op == Operation::ToolCall {
            Decision::ask(format!("{} wants to know", self.0))
        } else {
            Decision::Allow
        }
    }
}

#[tokio::test]
async fn authorize_hands_back_ask_with_every_question_and_begin_denies_it() {
    let recorder = Recorder::new();
    let runner = HookRunner::new(vec![
        Arc::new(recorder.clone()),
        Arc::new(Asker("first")),
        Arc::new(Asker("second")),
    ]);
    let Ok(treadle_hook::Authorization::Ask {
        active,
        hook,
        question,
    }) = runner.authorize(tool_call("write")).await
    else {
        panic!("expected Ask");
    };
    assert_eq!(hook, "first");
    assert_eq!(question, "first wants to know\nsecond wants to know");
    active.finish(OperationOutcome::denied("no"), None).await;

    // `begin` has nobody to ask: it refuses, naming approval_required (fail closed).
    recorder.clear();
    let denied = runner
        .begin(tool_call("write"))
        .await
        .expect_err("ask is a denial here");
    assert_eq!(denied.hook, "first");
    assert!(
        denied.reason.starts_with(treadle_hook::APPROVAL_REQUIRED),
        "{denied}"
    );
    let finish = recorder.records().pop().expect("finish record");
    assert!(matches!(
        finish.outcome,
        Some(OperationOutcome::Denied { .. })
    ));
}

#[tokio::test]
async fn a_later_deny_beats_an_earlier_ask() {
    let trace = trace();
    let runner = HookRunner::new(vec![
        Arc::new(Asker("asker")),
        Probe::denying("denier", Some(Operation::ToolCall), &trace),
    ]);
    let denied = runner
        .authorize(tool_call("write"))
        .await
        .expect_err("deny beats ask");
    assert_eq!(denied.hook, "denier");
}

#[test]
fn each_call_has_its_own_id_a_start_time_and_a_clock() {
    let (a, b) = (inference(), inference());
    assert_ne!(a.id, b.id);
    assert!(a.id.0 > 0);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(a.started_at_ms <= now_ms && a.started_at_ms + 60_000 > now_ms);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(a.elapsed() >= std::time::Duration::from_millis(20));
    // The id and start time travel in the JSON encoding; a clone is the same call.
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["id"], json!(a.id.0));
    assert_eq!(json["started_at_ms"], json!(a.started_at_ms));
    let back: HookCall = serde_json::from_value(json).unwrap();
    assert_eq!(back, a.clone());
}
