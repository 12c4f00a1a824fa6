//! Runs one batch of tool calls: prepare, authorize (asking through gates), execute, collect.
//!
//! Each call is first *prepared*, in call order: its arguments are parsed and checked
//! against the tool's schema, then the tool-call guards authorize it. A guard may ask; the
//! call then waits on a permission gate (see [`crate::gate`]) before the next call is
//! prepared, so an `ApproveAlways` given for one call already covers the later calls of
//! that tool. Every call is authorized before any runs, so a denial never races an
//! execution.
//!
//! Then the authorized calls run: a call of a [sequential](crate::Tool::sequential) tool runs
//! alone, after every call before it and before every call after it; between such calls the
//! rest run in parallel, at most `max_parallel` at once, except that calls declaring the same
//! [write target](crate::Tool::write_target) run one after another in call order.
//!
//! Every call gets exactly one `ToolCallStarted` and one `ToolCallCompleted` (rule 6), and
//! the results come back in call order whatever order the calls finish in. A call that is
//! malformed, unknown, denied, unanswered, failing or panicking still yields a result: its
//! reason, for the model to read. A call whose permission cannot be decided is never run
//! (rule 7). Only cancellation (an interrupt) discards the batch.
//!
//! A batch resumed after a crash (see `resume.rs`) gets, per call id, what the journal says
//! about its gate: an answer given before the crash is taken as is, and an open gate is
//! waited on under its original id instead of a new one being opened.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use treadle_event::{Block, EventKind, GateAnswer, GateId, Message, Role, StepId};
use treadle_hook::{APPROVAL_REQUIRED, Active, Authorization, HookCall, Outcome, Payload};

use crate::context::LoopContext;
use crate::gate;
use crate::protocol::{GateOpen, LoopMsg, TurnCoords};
use crate::resume::{self, PriorGate};
use crate::subject::{GateCall, GateRequest, GateSubject, StagedStep};

/// A tool call as the model wrote it.
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// What happened to a batch.
pub(crate) enum BatchOutcome {
    /// One `Role::Tool` message holding a result per call, in call order.
    Done(Message),
    Canceled,
}

/// Where the turn's batch runs: the loop it belongs to and how to reach its actor.
pub(crate) struct BatchScope<'a> {
    pub ctx: &'a LoopContext,
    pub actor: &'a ActorRef<LoopMsg>,
    pub coords: TurnCoords,
    pub step: StepId,
    /// The step's assistant message and its coordinates, journaled with every gate so a
    /// restore can resume the batch.
    pub staged: &'a StagedStep,
    pub cancel: &'a CancellationToken,
}

enum Prepared {
    Ready {
        arguments: serde_json::Value,
        /// Boxed: a begun operation is large, and most batches run without hooks.
        guard: Option<Box<Active>>,
    },
    Refused(String),
    /// Interrupted before it was authorized.
    Canceled,
}

/// A call's result text, and whether it is an error.
type Output = (String, bool);

const CANCELED: &str = "canceled: the turn was interrupted";

/// Runs `calls`; `prior` holds, by call id, the gates a resumed batch found in the journal
/// (empty for a fresh batch).
pub(crate) async fn run_batch(
    scope: &BatchScope<'_>,
    calls: Vec<Call>,
    mut prior: HashMap<String, PriorGate>,
) -> BatchOutcome {
    let mut prepared = Vec::with_capacity(calls.len());
    for call in &calls {
        prepared.push(if scope.cancel.is_cancelled() {
            Prepared::Canceled
        } else {
            prepare(scope, call, prior.remove(&call.id)).await
        });
    }

    let permits = Semaphore::new(scope.ctx.batch.max_parallel.max(1));
    let mut results: Vec<Option<Output>> = (0..calls.len()).map(|_| None).collect();
    for phase in plan(scope.ctx, &calls, prepared) {
        let lanes = phase.into_iter().map(|lane| async {
            let mut done = Vec::with_capacity(lane.len());
            for (index, prepared) in lane {
                let output = run_one(scope, &calls[index], prepared, &permits).await;
                done.push((index, output));
            }
            done
        });
        for (index, output) in futures::future::join_all(lanes).await.into_iter().flatten() {
            results[index] = Some(output);
        }
    }

    if scope.cancel.is_cancelled() {
        return BatchOutcome::Canceled;
    }
    let content = results
        .into_iter()
        .zip(&calls)
        .map(|(output, call)| {
            // Every index is filled by `plan`, which places each call exactly once.
            let (content, is_error) =
                output.unwrap_or_else(|| ("the call was not scheduled".to_owned(), true));
            Block::ToolResult {
                call_id: call.id.clone(),
                content,
                is_error,
            }
        })
        .collect();
    BatchOutcome::Done(Message {
        role: Role::Tool,
        content,
    })
}

/// Calls that run one after another, in call order.
type Lane = Vec<(usize, Prepared)>;

/// Orders the calls into phases that run one after another; the lanes of a phase run in
/// parallel. A sequential tool's call is a phase of its own; calls declaring one write
/// target share a lane. Every call is placed exactly once.
fn plan(ctx: &LoopContext, calls: &[Call], prepared: Vec<Prepared>) -> Vec<Vec<Lane>> {
    let mut phases: Vec<Vec<Lane>> = Vec::new();
    let mut lanes: Vec<Lane> = Vec::new();
    let mut by_target: HashMap<String, usize> = HashMap::new();
    for (index, (call, prepared)) in calls.iter().zip(prepared).enumerate() {
        let Prepared::Ready { arguments, .. } = &prepared else {
            // Refused and canceled calls do not run; they only report.
            lanes.push(vec![(index, prepared)]);
            continue;
        };
        let Some(tool) = ctx.tools.get(&call.name) else {
            lanes.push(vec![(index, prepared)]);
            continue;
        };
        if tool.sequential() {
            if !lanes.is_empty() {
                phases.push(std::mem::take(&mut lanes));
                by_target.clear();
            }
            phases.push(vec![vec![(index, prepared)]]);
            continue;
        }
        match tool.write_target(arguments) {
            Some(target) => match by_target.get(&target) {
                Some(&lane) => lanes[lane].push((index, prepared)),
                None => {
                    by_target.insert(target, lanes.len());
                    lanes.push(vec![(index, prepared)]);
                }
            },
            None => lanes.push(vec![(index, prepared)]),
        }
    }
    if !lanes.is_empty() {
        phases.push(lanes);
    }
    phases
}

fn hook_call(scope: &BatchScope<'_>, payload: Payload) -> HookCall {
    HookCall::new(scope.ctx.session, scope.ctx.loop_id, payload)
        .with_turn(scope.coords.turn)
        .with_step(scope.step)
}

/// Parses, checks and authorizes one call. The guards run again even for a resumed call
/// (they are this process's hooks); only an `Ask` consults `prior`. A prior open gate whose
/// guard no longer asks stays open until it is answered or its turn ends.
async fn prepare(scope: &BatchScope<'_>, call: &Call, prior: Option<PriorGate>) -> Prepared {
    let ctx = scope.ctx;
    if ctx.tools.get(&call.name).is_none() {
        return Prepared::Refused(format!(
            "unknown tool {:?}; the tools you can call are: {}",
            call.name,
            ctx.tools.names().join(", ")
        ));
    }
    let raw = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments.as_str()
    };
    let arguments = match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        Ok(other) => {
            return Prepared::Refused(format!(
                "arguments of {} must be a JSON object, got {other}",
                call.name
            ));
        }
        Err(e) => {
            return Prepared::Refused(format!(
                "arguments of {} are not valid JSON ({e}); send a JSON object",
                call.name
            ));
        }
    };
    if let Err(problems) = ctx.tools.check(&call.name, &arguments) {
        return Prepared::Refused(problems.to_string());
    }
    if ctx.hooks.is_empty() {
        return Prepared::Ready {
            arguments,
            guard: None,
        };
    }
    let payload = Payload::ToolCall {
        call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: arguments.clone(),
    };
    let (active, hook, question) = match ctx.hooks.authorize(hook_call(scope, payload)).await {
        Ok(Authorization::Allowed(active)) => {
            return Prepared::Ready {
                arguments,
                guard: Some(Box::new(active)),
            };
        }
        Ok(Authorization::Ask {
            active,
            hook,
            question,
        }) => (active, hook, question),
        Ok(_) => {
            // An answer this runtime does not know cannot be trusted to allow (rule 7).
            return Prepared::Refused("denied: the guards' answer is not understood here".into());
        }
        Err(denied) => return Prepared::Refused(format!("denied: {}", denied.reason)),
    };
    match permission(scope, call, &arguments, (&hook, &question), prior).await {
        Permission::Granted => Prepared::Ready {
            arguments,
            guard: Some(Box::new(active)),
        },
        Permission::Refused(reason) => {
            active.finish(Outcome::denied(reason.clone()), None).await;
            Prepared::Refused(format!("denied: {reason}"))
        }
        Permission::Canceled => {
            active.finish(Outcome::Canceled, None).await;
            Prepared::Canceled
        }
    }
}

enum Permission {
    Granted,
    Refused(String),
    Canceled,
}

/// Settles a guard's question: an answer the journal already holds, a remembered
/// `ApproveAlways`, a headless denial, or a gate (reopened after a crash, or new).
async fn permission(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: &serde_json::Value,
    (hook, question): (&str, &str),
    prior: Option<PriorGate>,
) -> Permission {
    let ctx = scope.ctx;
    let (gate, answer_rx, deadline) = match prior {
        // The person (or the deadline) answered this very call before the crash.
        Some(PriorGate::Answered(answer)) => return settled(answer),
        Some(PriorGate::Open {
            gate,
            deadline_at_ms,
            answer,
        }) => {
            // The recorded instant holds: time spent down counts against the deadline.
            let left = Duration::from_millis(deadline_at_ms.saturating_sub(resume::now_ms()));
            (gate, answer, left)
        }
        None => match open_gate(scope, call, arguments, hook, question).await {
            Ok(opened) => opened,
            Err(permission) => return permission,
        },
    };

    let wait_hook = if ctx.hooks.is_empty() {
        None
    } else {
        let payload = Payload::GateWait {
            gate,
            question: question.to_owned(),
        };
        // Gate waits are observed, not guarded: the runner ignores a deny here.
        ctx.hooks.begin(hook_call(scope, payload)).await.ok()
    };
    let span = crate::trace::gate_wait(gate, &call.name);
    let answer = wait(scope, gate, answer_rx, deadline)
        .instrument(span.clone())
        .await;
    let (permission, outcome) = match answer {
        None => (Permission::Canceled, Outcome::Canceled),
        Some(answer) => {
            let permission = settled(answer);
            let outcome = match &permission {
                Permission::Refused(reason) => Outcome::denied(reason.clone()),
                _ => Outcome::Completed,
            };
            (permission, outcome)
        }
    };
    span.record(
        "gate.answer",
        match &permission {
            Permission::Granted => "approve",
            Permission::Refused(_) => "deny",
            Permission::Canceled => "canceled",
        },
    );
    if let Some(active) = wait_hook {
        let output = answer_json(&permission);
        active.finish(outcome, Some(output)).await;
    }
    permission
}

/// What an answer means for the call.
fn settled(answer: GateAnswer) -> Permission {
    match answer {
        GateAnswer::Approve | GateAnswer::ApproveAlways => Permission::Granted,
        GateAnswer::Deny { reason } => Permission::Refused(reason),
        GateAnswer::Expired => Permission::Refused("no answer before the deadline".to_owned()),
    }
}

/// Asks the actor to open a new gate for the call, unless the answer is already known
/// (remembered approval, headless). Returns the gate, where its answer arrives, and how
/// long to wait.
async fn open_gate(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: &serde_json::Value,
    hook: &str,
    question: &str,
) -> Result<(GateId, oneshot::Receiver<GateAnswer>, Duration), Permission> {
    let ctx = scope.ctx;
    if ctx.batch.approvals.contains(&call.name) {
        return Err(Permission::Granted);
    }
    if ctx.batch.headless {
        return Err(Permission::Refused(format!(
            "{APPROVAL_REQUIRED}: this call needs approval and nobody can answer in this \
             session ({question})"
        )));
    }
    let deadline = ctx.batch.gate_deadline;
    let gate = GateId::new();
    let handler = ctx.batch.on_gate.clone();
    let header = ctx.turn_header(scope.coords, Some(scope.step));
    if handler.is_none() && !gate::announced(ctx, header, gate, question) {
        // Nobody would see the gate, so waiting out the deadline only stalls the turn.
        return Err(Permission::Refused(format!(
            "{APPROVAL_REQUIRED}: this call needs approval and nobody can answer: the \
             session has no on_gate handler and no subscriber ({question})"
        )));
    }
    let (answer_tx, answer_rx) = oneshot::channel();
    let call = GateCall {
        call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: arguments.clone(),
    };
    let typed = GateRequest {
        gate,
        call_id: call.call_id.clone(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
        reason: question.to_owned(),
        asked_by: hook.to_owned(),
    };
    let request = GateOpen {
        coords: scope.coords,
        step: scope.step,
        gate,
        question: question.to_owned(),
        subject: GateSubject::for_call(call, hook, gate::deadline_at_ms(deadline), scope.staged),
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
            Ok((gate, answer_rx, deadline))
        }
        Ok(CallResult::Success(Err(error))) => Err(Permission::Refused(format!(
            "the permission gate could not be opened ({error})"
        ))),
        _ => Err(Permission::Refused(
            "the session stopped before the gate opened".into(),
        )),
    }
}

fn answer_json(permission: &Permission) -> serde_json::Value {
    match permission {
        Permission::Granted => serde_json::json!({ "answer": "approve" }),
        Permission::Refused(reason) => serde_json::json!({ "answer": "deny", "reason": reason }),
        Permission::Canceled => serde_json::json!({ "answer": "canceled" }),
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
                // The actor is gone (the session stopped): nobody can approve any more.
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

/// Runs one prepared call between its Started and Completed events.
async fn run_one(
    scope: &BatchScope<'_>,
    call: &Call,
    prepared: Prepared,
    permits: &Semaphore,
) -> Output {
    let ctx = scope.ctx;
    let (content, is_error, canceled) = match prepared {
        Prepared::Refused(reason) => {
            started(scope, call);
            (reason, true, false)
        }
        Prepared::Canceled => {
            started(scope, call);
            (CANCELED.to_owned(), true, true)
        }
        Prepared::Ready { arguments, guard } => {
            let permit = tokio::select! {
                biased;
                _ = scope.cancel.cancelled() => None,
                permit = permits.acquire() => permit.ok(),
            };
            // Started marks the moment the call really begins, after it got its slot.
            started(scope, call);
            let (content, is_error, canceled) = match permit {
                Some(_permit) if !scope.cancel.is_cancelled() => {
                    execute(scope, call, arguments).await
                }
                _ => (CANCELED.to_owned(), true, true),
            };
            if let Some(guard) = guard {
                guard
                    .finish(outcome(&content, is_error, canceled), None)
                    .await;
            }
            (content, is_error, canceled)
        }
    };
    ctx.emit(
        ctx.turn_header(scope.coords, Some(scope.step)),
        EventKind::ToolCallCompleted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.clone(),
            is_error: is_error || canceled,
        },
    );
    (content, is_error)
}

fn started(scope: &BatchScope<'_>, call: &Call) {
    scope.ctx.emit(
        scope.ctx.turn_header(scope.coords, Some(scope.step)),
        EventKind::ToolCallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        },
    );
}

fn outcome(content: &str, is_error: bool, canceled: bool) -> Outcome {
    if canceled {
        Outcome::Canceled
    } else if is_error {
        Outcome::Failed {
            error: content.to_owned(),
        }
    } else {
        Outcome::Completed
    }
}

/// Runs the tool, around the execution hooks; returns `(content, is_error, canceled)`.
async fn execute(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: serde_json::Value,
) -> (String, bool, bool) {
    let ctx = scope.ctx;
    let Some(tool) = ctx.tools.get(&call.name) else {
        return (format!("unknown tool {:?}", call.name), true, false);
    };
    let around = if ctx.hooks.is_empty() {
        None
    } else {
        let payload = Payload::ToolExecution {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: arguments.clone(),
        };
        // Execution hooks observe; a denial here is not a guard and is ignored by the runner.
        ctx.hooks.begin(hook_call(scope, payload)).await.ok()
    };
    let span = crate::trace::tool(&call.name, &call.id);
    let run = AssertUnwindSafe(tool.call(arguments))
        .catch_unwind()
        .instrument(span.clone());
    let (content, is_error, canceled) = tokio::select! {
        biased;
        _ = scope.cancel.cancelled() => (CANCELED.to_owned(), true, true),
        result = run => match result {
            Ok(Ok(text)) => (text, false, false),
            Ok(Err(error)) => (error.0, true, false),
            Err(panic) => (format!("tool {} panicked: {}", call.name, crate::tool::panic_message(&panic)), true, false),
        },
    };
    if canceled {
        crate::trace::record_error(&span, "canceled");
    } else if is_error {
        crate::trace::record_error(&span, "tool_error");
    }
    if let Some(around) = around {
        let output = serde_json::Value::String(content.clone());
        around
            .finish(outcome(&content, is_error, canceled), Some(output))
            .await;
    }
    (content, is_error, canceled)
}
