//! Runs one batch of tool calls: prepare, authorize through the guards, execute, collect.
//!
//! Every call gets exactly one `ToolCallStarted` and one `ToolCallCompleted`, and the
//! results come back in call order whatever order the calls finish in. A call that is
//! malformed, unknown, denied, failing or panicking still yields a result: its reason, for
//! the model to read. Only cancellation (an interrupt) discards the batch.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use treadle_event::{Block, EventKind, Message, Role, StepId};
use treadle_hook::{Active, HookCall, Operation, Outcome, Payload};

use crate::context::{LoopContext, TurnCoords};

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

enum Prepared {
    Ready {
        arguments: serde_json::Value,
        guard: Option<Active>,
    },
    Refused(String),
}

pub(crate) async fn run_batch(
    ctx: &LoopContext,
    coords: TurnCoords,
    step: StepId,
    calls: Vec<Call>,
    cancel: &CancellationToken,
) -> BatchOutcome {
    // Every call is authorized before any runs, so a denial never races an execution.
    let mut prepared = Vec::with_capacity(calls.len());
    for call in &calls {
        prepared.push(prepare(ctx, coords, step, call).await);
    }

    let runs = calls
        .iter()
        .zip(prepared)
        .map(|(call, prepared)| run_one(ctx, coords, step, call, prepared, cancel));
    let results = futures::future::join_all(runs).await;

    if cancel.is_cancelled() {
        return BatchOutcome::Canceled;
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

fn hook_call(ctx: &LoopContext, coords: TurnCoords, step: StepId, payload: Payload) -> HookCall {
    let op = match payload {
        Payload::ToolExecution { .. } => Operation::ToolExecution,
        _ => Operation::ToolCall,
    };
    HookCall {
        op,
        session: ctx.session,
        loop_id: ctx.loop_id,
        turn: Some(coords.turn),
        step: Some(step),
        payload,
    }
}

async fn prepare(ctx: &LoopContext, coords: TurnCoords, step: StepId, call: &Call) -> Prepared {
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
    match ctx.hooks.begin(hook_call(ctx, coords, step, payload)).await {
        Ok(active) => Prepared::Ready {
            arguments,
            guard: Some(active),
        },
        Err(denied) => Prepared::Refused(format!("denied: {}", denied.reason)),
    }
}

/// Returns the call's result text and whether it is an error.
async fn run_one(
    ctx: &LoopContext,
    coords: TurnCoords,
    step: StepId,
    call: &Call,
    prepared: Prepared,
    cancel: &CancellationToken,
) -> (String, bool) {
    let header = || ctx.turn_header(coords, Some(step));
    ctx.emit(
        header(),
        EventKind::ToolCallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        },
    );
    let (content, is_error, canceled) = match prepared {
        Prepared::Refused(reason) => (reason, true, false),
        Prepared::Ready { arguments, guard } => {
            let (content, is_error, canceled) =
                execute(ctx, coords, step, call, arguments, cancel).await;
            if let Some(guard) = guard {
                guard
                    .finish(outcome(&content, is_error, canceled), None)
                    .await;
            }
            (content, is_error, canceled)
        }
    };
    ctx.emit(
        header(),
        EventKind::ToolCallCompleted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.clone(),
            is_error: is_error || canceled,
        },
    );
    (content, is_error)
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

async fn execute(
    ctx: &LoopContext,
    coords: TurnCoords,
    step: StepId,
    call: &Call,
    arguments: serde_json::Value,
    cancel: &CancellationToken,
) -> (String, bool, bool) {
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
        ctx.hooks
            .begin(hook_call(ctx, coords, step, payload))
            .await
            .ok()
    };
    let run = AssertUnwindSafe(tool.call(arguments)).catch_unwind();
    let (content, is_error, canceled) = tokio::select! {
        biased;
        _ = cancel.cancelled() => ("canceled: the turn was interrupted".to_owned(), true, true),
        result = run => match result {
            Ok(Ok(text)) => (text, false, false),
            Ok(Err(error)) => (error.0, true, false),
            Err(panic) => (format!("tool {} panicked: {}", call.name, panic_message(&panic)), true, false),
        },
    };
    if let Some(around) = around {
        let output = serde_json::Value::String(content.clone());
        around
            .finish(outcome(&content, is_error, canceled), Some(output))
            .await;
    }
    (content, is_error, canceled)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
