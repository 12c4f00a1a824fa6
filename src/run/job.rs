//! The job's walk: its plan in order, following `to:` and verdict routes (bounded by
//! `max_visits`), under the job's `timeout:`, then its hooks and its asserts.
//!
//! Routing happens after a step's hooks (a hook reacts, then the route reroutes) and sees
//! the real outcome of a step a `try:` tolerated. A route taken after a failure consumes
//! it. The job's `assert:` then judges: a failed check fails the job; an asserted
//! `outcome: failure` that happened, or a matching `execution:` with no `outcome:`, clears
//! the plan's failure (the fixture failed on purpose).

use super::exec::{Ctx, Done, Hooks, Status};
use crate::assert::{self, JobFacts, JobOutcome};
use crate::pipeline::duration::format_duration;
use crate::pipeline::{At, Step};

/// The target that continues in declaration order.
const NEXT: &str = "next";

impl<'a> Ctx<'a> {
    /// Runs the job's plan, following routes, then its hooks and asserts.
    pub(crate) async fn job(&'a self) -> Done {
        let plan = &self.job.plan;
        let workspace = self.loaded.pipeline.workspace.as_ref();
        let result = if let Some(why) = workspace.and_then(crate::pipeline::container::unsupported)
        {
            self.skip(plan);
            Done::errored(why)
        } else if let Err(e) = self.pick_sources().await {
            self.skip(plan);
            Done::errored(e.to_string())
        } else {
            match super::every::first_every(plan) {
                Some(start) => self.walk_every(start).await,
                None => self.walk(0, plan.len()).await,
            }
        };
        let job = self.job;
        let hooks = Hooks {
            on_success: job.on_success.as_deref(),
            on_failure: job.on_failure.as_deref(),
            on_error: job.on_error.as_deref(),
            on_abort: job.on_abort.as_deref(),
            ensure: job.ensure.as_deref(),
        };
        let result = self.run_hooks(&hooks, result, &self.root).await;
        let judged = self.judge(result.clone());
        self.blame(&result, judged)
    }

    /// Runs the plan's steps `from..end` in order, following routes (a route out of the
    /// range ends it).
    pub(crate) async fn walk(&'a self, from: usize, end: usize) -> Done {
        let plan = &self.job.plan[..end];
        let mut visits = vec![0u32; plan.len()];
        let mut i = from;
        let mut result = Done::ok();
        while i < plan.len() {
            if let Some(done) = self.past_deadline() {
                self.skip(&plan[i..]);
                result = done;
                break;
            }
            visits[i] += 1;
            if let Some(max) = &plan[i].max_visits
                && visits[i] > max.value
            {
                result = Done::failed(format!(
                    "step `{}` would run more than its max_visits ({})",
                    plan[i].display_name(),
                    max.value
                ));
                break;
            }
            let d = self.exec(&plan[i], self.root.clone()).await;
            let (d, target) = route(&plan[i], d);
            if !d.is_ok() {
                self.skip(&plan[i + 1..]);
                result = d;
                break;
            }
            match target.as_deref() {
                None | Some(NEXT) => i += 1,
                Some(t) => match plan.iter().position(|s| s.display_name() == t) {
                    Some(j) => {
                        if j > i + 1 {
                            self.skip(&plan[i + 1..j]);
                        }
                        i = j;
                    }
                    None => {
                        result =
                            Done::errored(format!("a route goes to `{t}`, which is not a step"));
                        break;
                    }
                },
            }
        }
        result
    }

    /// Probes the sources of the agents with `fallback:` before the first step, and notes
    /// those that start on a fallback (`crate::agent::source_pick`).
    async fn pick_sources(&self) -> Result<(), crate::agent::source_pick::NoSource> {
        let picked = crate::agent::source_pick::pick(self.loaded, self.job).await?;
        for p in picked {
            self.emit(super::transcript::Event::Notice {
                run: self.run,
                text: p.note.clone(),
            });
            self.state.with(|s| s.picked.insert(p.agent, p.fallback));
        }
        Ok(())
    }

    /// A failure when the job's `timeout:` has passed (checked before a step starts).
    pub(crate) fn past_deadline(&self) -> Option<Done> {
        let deadline = self.deadline?;
        if std::time::Instant::now() < deadline {
            return None;
        }
        let limit = self
            .job
            .timeout
            .as_ref()
            .map(|t| t.value.0)
            .unwrap_or_default();
        Some(Done::failed(format!(
            "job timeout: {} passed before the next step could start",
            format_duration(limit)
        )))
    }

    /// The names in the execution log, in order.
    pub(crate) fn executed(&self) -> Vec<String> {
        self.state
            .with(|s| s.log.iter().map(|l| l.name.clone()).collect())
    }

    /// Applies the job's `assert:` to how the job ended.
    fn judge(&self, result: Done) -> Done {
        let Some(spec) = &self.job.assert else {
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
        let executed = self.executed();
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
                    .find(|(v, _)| *v == crate::pipeline::flow::FAILURE_VERDICT)
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
