//! Outcome steps (Concourse's "step hooks"; not the guard hooks around an agent's tool
//! calls, `agent::hooks`): after a step (or a job) ended, the one of `on_success`,
//! `on_failure`, `on_error`, `on_abort` that matches how it ended, then `ensure`.
//!
//! A failing `on_success` or `ensure` fails what it belongs to; a failing `on_failure`,
//! `on_error` or `on_abort` is only shown. Outcome steps run after the run was cancelled get
//! a grace period of their own instead of the cancelled token.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Ctx, Done, Status};
use crate::pipeline::{At, Step};

/// How long outcome steps that run after an abort may take.
const ABORT_GRACE: Duration = Duration::from_secs(60);

/// Runs the outcome steps of a finished step and folds their result into its own.
pub(crate) async fn after_step<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    done: Done,
    cancel: &CancellationToken,
) -> Done {
    let steps = OutcomeSteps {
        on_success: step.outcomes.on_success.as_deref(),
        on_failure: step.outcomes.on_failure.as_deref(),
        on_error: step.outcomes.on_error.as_deref(),
        on_abort: step.outcomes.on_abort.as_deref(),
        ensure: step.outcomes.ensure.as_deref(),
    };
    run_after(ctx, &steps, done, cancel).await
}

/// Runs the one outcome step that matches how `done` ended, then `ensure`.
pub(crate) async fn run_after<'a>(
    ctx: &'a Ctx<'a>,
    steps: &OutcomeSteps<'a>,
    done: Done,
    cancel: &CancellationToken,
) -> Done {
    let mut result = done;
    // The run is already cancelled: outcome steps get a grace period of their own.
    let token = if result.status == Status::Aborted || cancel.is_cancelled() {
        grace_token()
    } else {
        cancel.clone()
    };
    let (matching, which) = match result.status {
        Status::Succeeded => (steps.on_success, "on_success"),
        Status::Failed => (steps.on_failure, "on_failure"),
        Status::Errored => (steps.on_error, "on_error"),
        Status::Aborted => (steps.on_abort, "on_abort"),
    };
    if let Some(h) = matching {
        let d = ctx.exec(h, token.clone()).await;
        if !d.is_ok() && result.is_ok() {
            result = fold(d, which, h);
        }
    }
    if let Some(h) = steps.ensure {
        let d = ctx.exec(h, token.clone()).await;
        if !d.is_ok() && result.is_ok() {
            result = fold(d, "ensure", h);
        }
    }
    result
}

/// The outcome steps of a step or a job.
pub(crate) struct OutcomeSteps<'a> {
    pub on_success: Option<&'a At<Step>>,
    pub on_failure: Option<&'a At<Step>>,
    pub on_error: Option<&'a At<Step>>,
    pub on_abort: Option<&'a At<Step>>,
    pub ensure: Option<&'a At<Step>>,
}

/// A token for outcome steps that run after the run was cancelled: cancelled itself only when
/// the grace period is over.
fn grace_token() -> CancellationToken {
    let token = CancellationToken::new();
    let later = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ABORT_GRACE).await;
        later.cancel();
    });
    token
}

fn fold(outcome_step: Done, which: &str, step: &At<Step>) -> Done {
    let name = step.display_name();
    Done {
        route: None,
        masked: None,
        // The outcome step's own failure, kind and all, said as the step's.
        ..outcome_step.reworded(|why| format!("{which} step `{name}` failed: {why}"))
    }
}
