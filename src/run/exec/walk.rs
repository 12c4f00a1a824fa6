//! The plan walked in order, following `to:` and verdict routes (bounded by
//! `max_visits`), under the job's `timeout:`: what the job's walk and each `every` input
//! set run.

use super::{Ctx, Done, Status};
use crate::pipeline::duration::format_duration;
use crate::pipeline::{At, Step};
use crate::run::failure::FailureKind;

/// The target that continues in declaration order.
const NEXT: &str = "next";

/// Runs the plan's steps `from..end` in order, following routes (a route out of the
/// range ends it).
pub(crate) async fn walk<'a>(ctx: &'a Ctx<'a>, from: usize, end: usize) -> Done {
    let plan = &ctx.job.plan[..end];
    let mut visits = vec![0u32; plan.len()];
    let mut i = from;
    let mut result = Done::ok();
    while i < plan.len() {
        if let Some(done) = past_deadline(ctx) {
            ctx.skip(&plan[i..]);
            result = done;
            break;
        }
        visits[i] += 1;
        if let Some(max) = &plan[i].max_visits
            && visits[i] > max.value
        {
            result = Done::fail(
                FailureKind::Limit,
                format!(
                    "step `{}` would run more than its max_visits ({})",
                    plan[i].display_name(),
                    max.value
                ),
            );
            break;
        }
        let d = ctx.exec(&plan[i], ctx.root.clone()).await;
        let (d, target) = route(&plan[i], d);
        if !d.is_ok() {
            ctx.skip(&plan[i + 1..]);
            result = d;
            break;
        }
        match target.as_deref() {
            None | Some(NEXT) => i += 1,
            Some(t) => match plan.iter().position(|s| s.display_name() == t) {
                Some(j) => {
                    if j > i + 1 {
                        ctx.skip(&plan[i + 1..j]);
                    }
                    i = j;
                }
                None => {
                    result = Done::fail(
                        FailureKind::Configuration,
                        format!("a route goes to `{t}`, which is not a step"),
                    );
                    break;
                }
            },
        }
    }
    result
}

/// Where the plan goes after `step` ended as `done`: the step's outcome (a failure a route
/// takes is consumed) and the target, if any.
fn route(step: &At<Step>, done: Done) -> (Done, Option<String>) {
    let real = done.masked.unwrap_or(done.status);
    let to = step.to.as_ref().map(|t| &t.value);
    match real {
        Status::Succeeded => {
            let target = done
                .route
                .clone()
                .or_else(|| to.and_then(|t| t.success.as_ref()).map(|t| t.value.clone()));
            (done, target)
        }
        // A failure route catches a failure; a `failure` verdict also catches an error
        // (the agent could not decide). An abort never routes.
        Status::Failed | Status::Errored => {
            let target = if real == Status::Failed {
                step.failure_route()
            } else {
                step.routes()
                    .into_iter()
                    .find(|(v, _)| *v == crate::pipeline::flow_keys::FAILURE_VERDICT)
                    .map(|(_, t)| t)
            };
            match target {
                Some(t) => (Done::ok(), Some(t.value.clone())),
                None => (done, None),
            }
        }
        Status::Aborted => (done, None),
    }
}

/// A failure when the job's `timeout:` has passed (checked before a step starts).
pub(crate) fn past_deadline<'a>(ctx: &Ctx<'a>) -> Option<Done> {
    let deadline = ctx.deadline?;
    if std::time::Instant::now() < deadline {
        return None;
    }
    let limit = ctx
        .job
        .timeout
        .as_ref()
        .map(|t| t.value.0)
        .unwrap_or_default();
    Some(Done::fail(
        FailureKind::Timeout,
        format!(
            "job timeout: {} passed before the next step could start",
            format_duration(limit)
        ),
    ))
}
