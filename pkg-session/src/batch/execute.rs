//! Runs one authorized call: its Started and Completed events, its execution hooks, the
//! tool itself (a panic is a result), and an effectful call's intent and result journaled
//! through the loop actor.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use ractor::rpc::CallResult;
use tokio::sync::Semaphore;
use tracing::Instrument;
use treadle_event::EventKind;
use treadle_hook::{OperationOutcome, Payload};

use crate::batch_scope::{BatchScope, Call, hook_call};
use crate::effect::Effect;
use crate::error::RecordError;
use crate::protocol::LoopMsg;

use super::{CANCELED, Output, Prepared};

/// Runs one prepared call between its Started and Completed events.
pub(super) async fn run_one(
    scope: &BatchScope<'_>,
    call: &Call,
    prepared: Prepared,
    permits: &Semaphore,
) -> Output {
    let ctx = scope.ctx;
    let (content, is_error, canceled) = match prepared {
        Prepared::Refused(reason) | Prepared::FailTurn(reason) => {
            started(scope, call);
            (reason, true, false)
        }
        Prepared::Settled { content, is_error } => {
            started(scope, call);
            (content, is_error, false)
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
    ctx.emit(ctx.turn_header(scope.coords, Some(scope.step)), || {
        EventKind::ToolCallCompleted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.clone(),
            is_error: is_error || canceled,
        }
    });
    (content, is_error)
}

fn started(scope: &BatchScope<'_>, call: &Call) {
    scope.ctx.emit(
        scope.ctx.turn_header(scope.coords, Some(scope.step)),
        || EventKind::ToolCallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        },
    );
}

fn outcome(content: &str, is_error: bool, canceled: bool) -> OperationOutcome {
    if canceled {
        OperationOutcome::Canceled
    } else if is_error {
        OperationOutcome::Failed {
            error: content.to_owned(),
        }
    } else {
        OperationOutcome::Completed
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
    let effectful = tool.effect() == Effect::Effectful;
    if effectful {
        let intent = EventKind::EffectIntent {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: arguments.clone(),
            subject: crate::subject::staged_value(scope.staged),
        };
        if let Err(error) = journal(scope, intent).await {
            // Run only what a restore would know about (rule 11).
            let reason = format!("not run: its intent could not be journaled ({error})");
            return (reason, true, false);
        }
    }
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
    let last = scope.deferred.returned();
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
    if effectful && !canceled {
        let result = EventKind::EffectResult {
            call_id: call.id.clone(),
            content: content.clone(),
            is_error,
        };
        if last {
            scope.deferred.keep(result);
        } else {
            journal_result(scope, result).await;
        }
    }
    (content, is_error, canceled)
}

/// Journals an effect's result on its own.
pub(super) async fn journal_result(scope: &BatchScope<'_>, result: EventKind) {
    let call = match &result {
        EventKind::EffectResult { call_id, .. } => call_id.clone(),
        _ => String::new(),
    };
    if let Err(error) = journal(scope, result).await {
        // The call ran; a restore will ask about it rather than repeat it.
        tracing::error!(%error, %call, "could not journal an effect's result");
    }
}

/// Journals an effect's intent or result through the loop actor (the loop's journal writer).
async fn journal(scope: &BatchScope<'_>, kind: EventKind) -> Result<(), RecordError> {
    let header = scope.ctx.turn_header(scope.coords, Some(scope.step));
    match scope
        .actor
        .call(
            |reply| LoopMsg::Record {
                header,
                kind,
                reply,
            },
            None,
        )
        .await
    {
        Ok(CallResult::Success(result)) => result.map(|_| ()).map_err(RecordError::from),
        _ => Err(RecordError::Stopped),
    }
}
