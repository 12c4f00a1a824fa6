//! The job's walk: its plan in order, following `to:` and verdict routes (bounded by
//! `max_visits`), under the job's `timeout:`, then its hooks and its asserts.
//!
//! Routing happens after a step's hooks (a hook reacts, then the route reroutes) and sees
//! the real outcome of a step a `try:` tolerated. A route taken after a failure consumes
//! it. The job's `assert:` then judges: a failed check fails the job; an asserted
//! `outcome: failure` that happened, or a matching `execution:` with no `outcome:`, clears
//! the plan's failure (the fixture failed on purpose).

use super::{Ctx, Done, OutcomeSteps, Status};
use crate::assert::{self, JobFacts, JobOutcome};
use crate::run::failure::FailureKind;

/// Runs the job's plan, following routes, then its hooks and asserts.
pub(crate) async fn job<'a>(ctx: &'a Ctx<'a>) -> Done {
    let plan = &ctx.job.plan;
    let workspace = ctx.loaded.pipeline.workspace.as_ref();
    let result = if let Some(why) = workspace.and_then(crate::pipeline::container::unsupported) {
        ctx.skip(plan);
        Done::fail(FailureKind::Configuration, why)
    } else if let Err(e) = pick_sources(ctx).await {
        ctx.skip(plan);
        Done::fail(FailureKind::ModelOutage, e.to_string())
    } else {
        match super::every::first_every(plan) {
            Some(start) => super::every::walk_every(ctx, start).await,
            None => super::walk::walk(ctx, 0, plan.len()).await,
        }
    };
    let job = ctx.job;
    let outcome_steps = OutcomeSteps {
        on_success: job.on_success.as_deref(),
        on_failure: job.on_failure.as_deref(),
        on_error: job.on_error.as_deref(),
        on_abort: job.on_abort.as_deref(),
        ensure: job.ensure.as_deref(),
    };
    let result = super::outcome_steps::run_after(ctx, &outcome_steps, result, &ctx.root).await;
    let judged = judge(ctx, result.clone());
    super::blame::blame(ctx, &result, judged)
}

/// The names in the execution log, in order.
pub(crate) fn executed<'a>(ctx: &Ctx<'a>) -> Vec<String> {
    ctx.state
        .with(|s| s.log.iter().map(|l| l.name.clone()).collect())
}

/// Applies the job's `assert:` to how the job ended.
fn judge<'a>(ctx: &Ctx<'a>, result: Done) -> Done {
    let Some(spec) = &ctx.job.assert else {
        return result;
    };
    if result.status == Status::Aborted {
        return result;
    }
    let outcome = if result.is_ok() {
        JobOutcome::Success
    } else {
        JobOutcome::Failure
    };
    let executed = executed(ctx);
    let facts = JobFacts {
        executed: &executed,
        outcome,
    };
    let failures = assert::check_job(spec, &facts);
    if !failures.is_empty() {
        return Done::asserts_failed("job assert", failures);
    }
    let clears = match spec.outcome.as_deref() {
        Some(o) => assert::JobOutcome::parse(o) == Some(JobOutcome::Failure),
        None => spec.execution.is_some(),
    };
    if clears { Done::ok() } else { result }
}

/// Probes the sources of the agents with `fallback:` that `ctx.job` reaches and this run
/// has not probed yet, and notes those that start on a fallback (`crate::agent::source_pick`):
/// a YAML job's once before its first step, a workflow's before each step that brings an
/// agent the run had not used.
pub(crate) async fn pick_sources(ctx: &Ctx<'_>) -> Result<(), crate::agent::source_pick::NoSource> {
    let probed: std::collections::HashSet<String> = ctx.state.with(|s| s.probed.clone());
    let (picked, newly) = crate::agent::source_pick::pick(ctx.loaded, ctx.job, &probed).await?;
    for p in &picked {
        ctx.emit(crate::run::transcript::Event::Notice {
            run: ctx.run,
            text: p.note.clone(),
        });
    }
    ctx.state.with(|s| {
        s.probed.extend(newly);
        s.picked
            .extend(picked.into_iter().map(|p| (p.agent, p.fallback)));
    });
    Ok(())
}
