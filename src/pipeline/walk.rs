//! Walks over a parsed pipeline: every step of a job (nested steps and hooks included) and
//! the agents a job uses, with their resolved models.

use std::collections::BTreeSet;

use super::agent_def::Agent;
use super::format::{Job, Pipeline};
use super::model::{self, ResolvedModel};
use super::step::Step;
use super::step::StepKind;

/// The agents the given job (or every job) uses, with their resolved models.
pub fn used_agents<'p>(
    pipeline: &'p Pipeline,
    job: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'p Agent, Result<ResolvedModel, model::ModelError>)> {
    let mut names = BTreeSet::new();
    for j in pipeline
        .jobs
        .iter()
        .filter(|j| job.is_none_or(|n| j.name.value == n))
    {
        visit_job(j, &mut |s| {
            if let StepKind::Agent(a) = &s.kind {
                names.insert(a.agent.value.clone());
            }
        });
    }
    pipeline
        .agents
        .iter()
        .filter(|a| names.contains(&a.name.value))
        .map(|a| (a, model::resolve(&a.source, a.name.pos, env)))
        .collect()
}

/// Calls `f` on every step of a job, nested steps and hooks included, in file order.
pub fn visit_job(job: &Job, f: &mut dyn FnMut(&Step)) {
    for s in job.plan.iter().chain(job.hooks().map(|(_, h)| h)) {
        visit_step(s, f);
    }
}

pub(crate) fn visit_step(step: &Step, f: &mut dyn FnMut(&Step)) {
    f(step);
    for s in step.children() {
        visit_step(s, f);
    }
    for (_, hook) in step.hooks() {
        visit_step(hook, f);
    }
}
