//! Runs one batch of tool calls: prepare, authorize (asking through gates), execute, collect.
//!
//! Each call is first *prepared*, in call order: its arguments are parsed and checked
//! against the tool's schema, then the tool-call guards authorize it. A guard may ask; the
//! call then waits on a permission gate (see [`crate::gate`]) before the next call is
//! prepared, so an `ApproveAlways` given for one call already covers the later calls of
//! that tool. Every call is authorized before any runs, so a denial never races an
//! execution.
//!
//! Then the authorized calls run as a dependency graph: each call's
//! [footprint](crate::Tool::touches) says what it reads and writes, and a call starts only
//! once every earlier call it conflicts with has ended (a read after a write of the same
//! path, two writes of it, anything after a call that may touch everything). Calls that
//! conflict with nothing run in parallel, at most `max_parallel` at once. So the results
//! are those of the calls run one by one in the model's order.
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

use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use treadle_event::{Block, GateAnswer, Message, Role};
use treadle_hook::{Active, Authorization, OperationOutcome, Payload};

use crate::ask::{self, Ask, Asked};
use crate::batch_scope::{BatchScope, Call, hook_call};
use crate::context::LoopContext;
use crate::footprint::{self, Footprint};
use crate::question::HumanQuestion;
use crate::resume::{Prior, PriorGate};
use crate::subject::GateKind;

mod execute;

use execute::{journal_result, run_one};

/// What happened to a batch.
pub(crate) enum BatchOutcome {
    /// One `Role::Tool` message holding a result per call, in call order.
    Done(Message),
    Canceled,
    /// An unfinished effect's gate said to fail the turn (or nobody answered it).
    Failed(String),
}

enum Prepared {
    Ready {
        arguments: serde_json::Value,
        /// Boxed: a begun operation is large, and most batches run without hooks.
        guard: Option<Box<Active>>,
    },
    Refused(String),
    /// Already has its result: journaled before a crash, given by a person, or skipped.
    Settled {
        content: String,
        is_error: bool,
    },
    /// An unfinished effect whose gate says to fail the turn.
    FailTurn(String),
    /// Interrupted before it was authorized.
    Canceled,
}

/// A call's result text, and whether it is an error.
type Output = (String, bool);

const CANCELED: &str = "canceled: the turn was interrupted";

/// Runs `calls`; `prior` holds what a resumed batch found in the journal (the gates and
/// effect results of its calls; empty for a fresh batch).
pub(crate) async fn run_batch(
    scope: &BatchScope<'_>,
    calls: Vec<Call>,
    mut prior: Prior,
) -> BatchOutcome {
    let early = premature(scope.ctx, &calls);
    let mut prepared = Vec::with_capacity(calls.len());
    for call in &calls {
        prepared.push(if scope.cancel.is_cancelled() {
            Prepared::Canceled
        } else {
            prepare(scope, call, &mut prior, early.as_deref()).await
        });
    }
    let failed = prepared.iter().find_map(|p| match p {
        Prepared::FailTurn(reason) => Some(reason.clone()),
        _ => None,
    });
    let ready = prepared
        .iter()
        .filter(|p| matches!(p, Prepared::Ready { .. }))
        .count();
    scope.deferred.expect(ready);

    let permits = Semaphore::new(scope.ctx.batch.max_parallel.max(1));
    let waits = footprint::dependencies(&footprints(scope.ctx, &calls, &prepared));
    // One latch per call, set when it has ended; a call waits on its dependencies' latches.
    let ended: Vec<watch::Sender<bool>> = calls.iter().map(|_| watch::Sender::new(false)).collect();
    let runs = prepared.into_iter().enumerate().map(|(index, prepared)| {
        let (ended, waits, permits, call) = (&ended, &waits[index], &permits, &calls[index]);
        async move {
            for &earlier in waits {
                // The sender lives as long as the batch, so this only returns once it is set.
                let _ = ended[earlier].subscribe().wait_for(|done| *done).await;
            }
            let output = run_one(scope, call, prepared, permits).await;
            ended[index].send_replace(true);
            output
        }
    });
    let results: Vec<Output> = futures::future::join_all(runs).await;

    if scope.cancel.is_cancelled() || failed.is_some() {
        // No commit follows: a kept result is journaled on its own, as it would have been.
        for result in scope.deferred.take() {
            journal_result(scope, result).await;
        }
    }
    if scope.cancel.is_cancelled() {
        return BatchOutcome::Canceled;
    }
    if let Some(reason) = failed {
        return BatchOutcome::Failed(reason);
    }
    let content = results
        .into_iter()
        .zip(&calls)
        .map(|((content, is_error), call)| Block::ToolResult {
            call_id: call.id.clone(),
            content,
            is_error,
        })
        .collect();
    BatchOutcome::Done(Message {
        role: Role::Tool,
        content,
    })
}

/// The result of a decision sent too early: when the batch holds a call that ends the turn
/// (a verdict) and calls that do not, the model decided before it saw their results, so the
/// decision is not taken and the model is told to decide again once it has read them. The
/// step's next model call decides. `None` when no call would be affected.
fn premature(ctx: &LoopContext, calls: &[Call]) -> Option<String> {
    let ends = |call: &Call| ctx.tools.get(&call.name).is_some_and(|t| t.ends_turn());
    let mut evidence: Vec<&str> = calls
        .iter()
        .filter(|c| !ends(c))
        .map(|c| c.name.as_str())
        .collect();
    if evidence.is_empty() || !calls.iter().any(ends) {
        return None;
    }
    evidence.dedup();
    Some(format!(
        "not taken: this decision came in the same batch as {}, whose results you had not \
         seen yet. Read those results, then make the call again to decide.",
        evidence.join(", ")
    ))
}

/// What each call that will run touches; `None` for one that only reports (refused,
/// settled, canceled), which waits for nothing.
fn footprints(ctx: &LoopContext, calls: &[Call], prepared: &[Prepared]) -> Vec<Option<Footprint>> {
    calls
        .iter()
        .zip(prepared)
        .map(|(call, prepared)| match prepared {
            Prepared::Ready { arguments, .. } => {
                ctx.tools.get(&call.name).map(|t| t.touches(arguments))
            }
            _ => None,
        })
        .collect()
}

/// Parses, checks and authorizes one call. The guards run again even for a resumed call
/// (they are this process's hooks); only an `Ask` consults `prior`. A prior open gate whose
/// guard no longer asks stays open until it is answered or its turn ends. A call with a
/// journaled result is not run again, and one a crash interrupted runs again only if its
/// effect gate says so (rule 11). A person answers an `ask_human` call once it is allowed.
async fn prepare(
    scope: &BatchScope<'_>,
    call: &Call,
    prior: &mut Prior,
    early: Option<&str>,
) -> Prepared {
    let ctx = scope.ctx;
    if let Some((content, is_error)) = prior.results.remove(&call.id) {
        return Prepared::Settled { content, is_error };
    }
    let Some(tool) = ctx.tools.get(&call.name).cloned() else {
        return Prepared::Refused(format!(
            "unknown tool {:?}; the tools you can call are: {}",
            call.name,
            ctx.tools.names().join(", ")
        ));
    };
    if let Some(early) = early
        && tool.ends_turn()
    {
        return Prepared::Refused(early.to_owned());
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
    if let Some(gate) = prior.gates.remove(&(call.id.clone(), GateKind::Effect))
        && let Some(settled) = unfinished(scope, call, &arguments, gate).await
    {
        return settled;
    }
    let prepared = authorize(scope, call, arguments, prior).await;
    let Prepared::Ready { arguments, guard } = prepared else {
        return prepared;
    };
    let Some(question) = tool.human_question(&arguments) else {
        return Prepared::Ready { arguments, guard };
    };
    let prior = prior.gates.remove(&(call.id.clone(), GateKind::HumanInput));
    let settled = human(scope, call, &arguments, question, prior).await;
    if let Some(guard) = guard {
        guard.finish(OperationOutcome::Completed, None).await;
    }
    settled
}

/// The guards' answer about one parsed, checked call.
async fn authorize(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: serde_json::Value,
    prior: &mut Prior,
) -> Prepared {
    let ctx = scope.ctx;
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
        Ok(Authorization::Allowed(active)) => return ready(scope, call, arguments, active).await,
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
    let prior = prior.gates.remove(&(call.id.clone(), GateKind::Permission));
    match permission(scope, call, &arguments, (&hook, &question), prior).await {
        Permission::Granted => ready(scope, call, arguments, active).await,
        Permission::Refused(reason) => {
            active
                .finish(OperationOutcome::denied(reason.clone()), None)
                .await;
            Prepared::Refused(format!("denied: {reason}"))
        }
        Permission::Canceled => {
            active.finish(OperationOutcome::Canceled, None).await;
            Prepared::Canceled
        }
    }
}

/// An authorized call, with the arguments its guards left in the call: a hook may have
/// rewritten them ([`treadle_hook::Decision::Rewrite`]), and rewritten arguments must fit
/// the tool's schema like the model's, or the call is refused.
async fn ready(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: serde_json::Value,
    active: Active,
) -> Prepared {
    let arguments = match &active.call().payload {
        Payload::ToolCall {
            arguments: left, ..
        } if *left != arguments => left.clone(),
        _ => {
            return Prepared::Ready {
                arguments,
                guard: Some(Box::new(active)),
            };
        }
    };
    if let Err(problems) = scope.ctx.tools.check(&call.name, &arguments) {
        let reason = format!(
            "denied: a hook rewrote the arguments of {} and they do not fit its schema: {problems}",
            call.name
        );
        active
            .finish(OperationOutcome::denied(reason.clone()), None)
            .await;
        return Prepared::Refused(reason);
    }
    Prepared::Ready {
        arguments,
        guard: Some(Box::new(active)),
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
    if prior.is_none() && scope.ctx.batch.approvals.contains(&call.name) {
        return Permission::Granted;
    }
    let request = Ask {
        kind: GateKind::Permission,
        question,
        asked_by: hook,
        human: None,
        arguments,
        deadline: scope.ctx.batch.gate_deadline,
    };
    match ask::ask(scope, call, request, prior).await {
        Asked::Answered(GateAnswer::Approve | GateAnswer::ApproveAlways) => Permission::Granted,
        Asked::Answered(GateAnswer::Deny { reason }) => Permission::Refused(reason),
        Asked::Answered(GateAnswer::Expired) => {
            Permission::Refused("no answer before the deadline".to_owned())
        }
        // The actor refuses a value for a permission; one read from an old journal denies.
        Asked::Answered(GateAnswer::Answer { .. }) => {
            Permission::Refused("a permission gate was answered with a value".to_owned())
        }
        Asked::Unanswerable(reason) => Permission::Refused(reason.to_string()),
        Asked::Canceled => Permission::Canceled,
    }
}

/// A person answers the call: its result is their answer (or the question's default at the
/// deadline), never the tool's.
async fn human(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: &serde_json::Value,
    (question, deadline): (HumanQuestion, Option<Duration>),
    prior: Option<PriorGate>,
) -> Prepared {
    if let Err(reason) = question.compiles() {
        return Prepared::Refused(reason.to_string());
    }
    let default = question.default.clone();
    let text = question.question.clone();
    let request = Ask {
        kind: GateKind::HumanInput,
        question: &text,
        asked_by: "ask_human",
        human: Some(question),
        arguments,
        deadline: deadline.unwrap_or(scope.ctx.batch.gate_deadline),
    };
    let (content, is_error) = match ask::ask(scope, call, request, prior).await {
        Asked::Answered(GateAnswer::Answer { value }) => (ask::value_text(&value), false),
        Asked::Answered(GateAnswer::Deny { reason }) => {
            (format!("the person declined to answer: {reason}"), true)
        }
        Asked::Answered(GateAnswer::Expired) => match &default {
            Some(value) => (ask::value_text(value), false),
            None => ("no answer before the deadline".to_owned(), true),
        },
        Asked::Answered(GateAnswer::Approve | GateAnswer::ApproveAlways) => {
            ("the question was answered without a value".to_owned(), true)
        }
        Asked::Unanswerable(reason) => match &default {
            Some(value) => (ask::value_text(value), false),
            None => (reason.to_string(), true),
        },
        Asked::Canceled => return Prepared::Canceled,
    };
    Prepared::Settled { content, is_error }
}

/// A call a crash caught between its intent and its result: its effect gate's answer says
/// whether it runs again (`None`), is skipped with a result, or fails the turn.
async fn unfinished(
    scope: &BatchScope<'_>,
    call: &Call,
    arguments: &serde_json::Value,
    prior: PriorGate,
) -> Option<Prepared> {
    let request = Ask {
        kind: GateKind::Effect,
        question: "",
        asked_by: "effects",
        human: None,
        arguments,
        deadline: scope.ctx.batch.gate_deadline,
    };
    Some(match ask::ask(scope, call, request, Some(prior)).await {
        Asked::Answered(GateAnswer::Approve | GateAnswer::ApproveAlways) => return None,
        Asked::Answered(GateAnswer::Answer { value }) => Prepared::Settled {
            content: ask::value_text(&value),
            is_error: false,
        },
        Asked::Answered(GateAnswer::Deny { reason }) => Prepared::FailTurn(reason),
        Asked::Answered(GateAnswer::Expired) => Prepared::FailTurn(format!(
            "nobody said before the deadline whether to run {} again after a crash",
            call.name
        )),
        Asked::Unanswerable(reason) => Prepared::FailTurn(reason.to_string()),
        Asked::Canceled => Prepared::Canceled,
    })
}
