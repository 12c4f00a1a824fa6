//! Asking through gates from a batch: the permission a guard asked for, a person's answer to
//! an `ask_human` question, and what to do with an effect a crash interrupted.
//!
//! Every kind goes the same way (see [`crate::gate`]): an answer the journal already holds
//! (a resumed batch) is taken as is; a gate reopened at restore is waited on under its id
//! until its recorded deadline; otherwise a new gate is opened through the loop actor and
//! waited on, with the gate-wait hooks and span around the wait.

use std::time::Duration;

use ractor::rpc::CallResult;
use tokio::sync::oneshot;
use tracing::Instrument;
use treadle_event::{GateAnswer, GateId};
use treadle_hook::{OperationOutcome, Payload};

use crate::batch_scope::{BatchScope, Call, hook_call};
use crate::error::GateOpenError;
use crate::gate;
use crate::protocol::{GateOpen, LoopMsg};
use crate::question::HumanQuestion;
use crate::resume::{self, PriorGate};
use crate::subject::{GateCall, GateKind, GateQuestion, GateSubject};

/// A gate to ask through, for one call.
pub(crate) struct Ask<'a> {
    pub kind: GateKind,
    /// The question, as `GateOpened` journals it.
    pub question: &'a str,
    /// The hook whose guard asked (permission gates).
    pub asked_by: &'a str,
    pub human: Option<HumanQuestion>,
    pub arguments: &'a serde_json::Value,
    pub deadline: Duration,
}

/// How asking ended.
pub(crate) enum Asked {
    Answered(GateAnswer),
    /// Nobody can answer in this session; the reason says why.
    Unanswerable(GateOpenError),
    /// The turn was interrupted while the call waited.
    Canceled,
}

/// Asks through a gate (or takes the journal's answer from `prior`) and waits for the answer.
pub(crate) async fn ask(
    scope: &BatchScope<'_>,
    call: &Call,
    ask: Ask<'_>,
    prior: Option<PriorGate>,
) -> Asked {
    let ctx = scope.ctx;
    let (gate, answer_rx, deadline) = match prior {
        // The person (or the deadline) answered this very call before the crash.
        Some(PriorGate::Answered(answer)) => return Asked::Answered(answer),
        Some(PriorGate::Open {
            gate,
            deadline_at_ms,
            answer,
        }) => {
            // The recorded instant holds: time spent down counts against the deadline.
            let left = Duration::from_millis(deadline_at_ms.saturating_sub(resume::now_ms()));
            (gate, answer, left)
        }
        None => match open(scope, call, &ask).await {
            Ok(opened) => opened,
            Err(reason) => return Asked::Unanswerable(reason),
        },
    };

    let wait_hook = if ctx.hooks.is_empty() {
        None
    } else {
        let payload = Payload::GateWait {
            gate,
            question: ask.question.to_owned(),
        };
        // Gate waits are observed, not guarded: the runner ignores a deny here.
        ctx.hooks.begin(hook_call(scope, payload)).await.ok()
    };
    let span = crate::trace::gate_wait(gate, &call.name);
    let answer = wait(scope, gate, answer_rx, deadline)
        .instrument(span.clone())
        .await;
    let (label, outcome) = match &answer {
        None => ("canceled", OperationOutcome::Canceled),
        Some(GateAnswer::Approve | GateAnswer::ApproveAlways) => {
            ("approve", OperationOutcome::Completed)
        }
        Some(GateAnswer::Answer { .. }) => ("answer", OperationOutcome::Completed),
        Some(GateAnswer::Deny { reason }) => ("deny", OperationOutcome::denied(reason.clone())),
        Some(GateAnswer::Expired) => (
            "deny",
            OperationOutcome::denied("no answer before the deadline"),
        ),
    };
    span.record("gate.answer", label);
    if let Some(active) = wait_hook {
        let output = match &answer {
            Some(GateAnswer::Deny { reason }) => {
                serde_json::json!({ "answer": label, "reason": reason })
            }
            _ => serde_json::json!({ "answer": label }),
        };
        active.finish(outcome, Some(output)).await;
    }
    match answer {
        Some(answer) => Asked::Answered(answer),
        None => Asked::Canceled,
    }
}

/// Asks the actor to open a new gate for the call, unless nobody could answer it. Returns
/// the gate, where its answer arrives, and how long to wait.
async fn open(
    scope: &BatchScope<'_>,
    call: &Call,
    ask: &Ask<'_>,
) -> Result<(GateId, oneshot::Receiver<GateAnswer>, Duration), GateOpenError> {
    let ctx = scope.ctx;
    let handler = ctx.batch.on_gate.clone();
    // A headless session answers no permission; a question may still go to its handler
    // (a pipeline relays questions to people that way).
    if ctx.batch.headless && (ask.kind == GateKind::Permission || handler.is_none()) {
        let question = ask.question.to_owned();
        return Err(GateOpenError::Headless { question });
    }
    let gate = GateId::new();
    let header = ctx.turn_header(scope.coords, Some(scope.step));
    if handler.is_none() && !gate::announced(ctx, header, gate, ask.question) {
        // Nobody would see the gate, so waiting out the deadline only stalls the turn.
        let question = ask.question.to_owned();
        return Err(GateOpenError::Unseen { question });
    }
    let (answer_tx, answer_rx) = oneshot::channel();
    let gate_call = GateCall {
        call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: ask.arguments.clone(),
    };
    let deadline_at_ms = gate::deadline_at_ms(ask.deadline);
    let subject = match ask.kind {
        GateKind::Permission => {
            GateSubject::for_call(gate_call, ask.asked_by, deadline_at_ms, scope.staged)
        }
        kind => GateSubject::for_kind(
            kind,
            gate_call,
            ask.human.clone(),
            deadline_at_ms,
            scope.staged,
        ),
    };
    let typed = GateQuestion {
        gate,
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments: ask.arguments.clone(),
        reason: ask.question.to_owned(),
        asked_by: subject.asked_by.clone(),
        kind: ask.kind,
        human: ask.human.clone(),
    };
    let request = GateOpen {
        coords: scope.coords,
        step: scope.step,
        gate,
        question: ask.question.to_owned(),
        subject,
        answer: answer_tx,
    };
    match scope
        .actor
        .call(|reply| LoopMsg::OpenGate { request, reply }, None)
        .await
    {
        Ok(CallResult::Success(Ok(()))) => {
            if let Some(handler) = handler {
                // The handler answers through the actor like anyone else, on its own task,
                // so the answer is journaled first and an answer from it never deadlocks.
                let actor = scope.actor.clone();
                tokio::spawn(async move {
                    let answer = handler(typed).await;
                    let _ = actor.cast(LoopMsg::ResolveGate {
                        gate,
                        answer,
                        reply: None,
                    });
                });
            }
            Ok((gate, answer_rx, ask.deadline))
        }
        Ok(CallResult::Success(Err(error))) => Err(GateOpenError::Journal(error)),
        _ => Err(GateOpenError::Stopped),
    }
}

/// Waits for the gate's answer. At the deadline it asks the actor to expire the gate and
/// keeps waiting: the actor decides whether the expiry or an answer that raced it wins, and
/// sends the winner. `None` when the turn is interrupted first.
async fn wait(
    scope: &BatchScope<'_>,
    gate: GateId,
    mut answer: oneshot::Receiver<GateAnswer>,
    deadline: Duration,
) -> Option<GateAnswer> {
    let timer = tokio::time::sleep(deadline);
    tokio::pin!(timer);
    let mut expiring = false;
    loop {
        tokio::select! {
            biased;
            _ = scope.cancel.cancelled() => return None,
            received = &mut answer => {
                // The actor is gone (the session stopped): nobody can answer any more.
                return Some(received.unwrap_or_else(|_| GateAnswer::Deny {
                    reason: "the session stopped before the gate was answered".into(),
                }));
            }
            _ = &mut timer, if !expiring => {
                expiring = true;
                let message = LoopMsg::ResolveGate { gate, answer: GateAnswer::Expired, reply: None };
                if scope.actor.cast(message).is_err() {
                    return Some(GateAnswer::Expired);
                }
            }
        }
    }
}

/// A value as the model reads it: a string as is, anything else as compact JSON.
pub(crate) fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
