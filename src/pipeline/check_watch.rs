//! The checks of what `treadle watch` reads: `passed:` (names an existing other job that
//! gets the same resource), `webhook_token_env:` (a variable's name, never a token), and a
//! job's `max_in_flight:` beside `serial:` or `serial_groups:` (the number would do
//! nothing).

use super::at::At;
use super::diagnostic::{Finding, Problem};
use super::format::{Job, Pipeline, Resource};
use super::step::StepKind;
use super::walk::visit_job;

/// The resources a job's `get` steps fetch (after `resource:`), anywhere in the job.
pub fn resources_got(job: &Job) -> Vec<String> {
    let mut out = Vec::new();
    visit_job(job, &mut |s| {
        if let StepKind::Get(super::leaf_step::GetStep { resource: r, .. }) = &s.kind
            && !out.contains(&r.value)
        {
            out.push(r.value.clone());
        }
    });
    out
}

/// Every check of this module over the whole file.
pub fn check(pipeline: &Pipeline) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in &pipeline.resources {
        out.extend(webhook_token_env(r));
    }
    for job in &pipeline.jobs {
        out.extend(limits(job));
        out.extend(passed(pipeline, job));
    }
    out
}

/// Whether `name` reads as an environment variable's name (capitals, digits, `_`).
pub(super) fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn webhook_token_env(r: &Resource) -> Option<Finding> {
    let var = r.webhook_token_env.as_ref()?;
    if is_var_name(&var.value) {
        return None;
    }
    // The value is not echoed: it may be the very token that must not be written down.
    Some((
        var.pos,
        Problem::InvalidValue,
        format!(
            "`webhook_token_env` of resource `{}` is not a variable name",
            r.name.value
        ),
        "write the NAME of the environment variable that holds the token (capitals, digits \
         and `_`, e.g. `webhook_token_env: REPO_HOOK_TOKEN`), never the token itself"
            .to_owned(),
    ))
}

fn limits(job: &Job) -> Option<Finding> {
    let m = job.max_in_flight.as_ref()?;
    let serial = job.serial.as_ref().is_some_and(|s| s.value);
    if !serial && job.serial_groups.is_empty() {
        return None;
    }
    Some((
        m.pos,
        Problem::InvalidValue,
        format!(
            "job `{}` has `max_in_flight` beside `serial`/`serial_groups`, which already allow one build at a time",
            job.name.value
        ),
        "drop `max_in_flight`, or drop `serial: true` and `serial_groups` to allow more than one"
            .to_owned(),
    ))
}

fn passed(pipeline: &Pipeline, job: &Job) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut gated: Vec<(String, Vec<At<String>>)> = Vec::new();
    visit_job(job, &mut |s| {
        if let StepKind::Get(super::leaf_step::GetStep {
            resource: r,
            passed: Some(p),
            ..
        }) = &s.kind
        {
            gated.push((r.value.clone(), p.value.clone()));
        }
    });
    for (resource, upstream) in gated {
        for name in upstream {
            out.extend(one_passed(pipeline, job, &resource, &name));
        }
    }
    out
}

fn one_passed(
    pipeline: &Pipeline,
    job: &Job,
    resource: &str,
    name: &At<String>,
) -> Option<Finding> {
    let finding =
        |message: String, hint: String| Some((name.pos, Problem::InvalidValue, message, hint));
    if name.value == job.name.value {
        return finding(
            format!("`passed` of job `{}` names the job itself", job.name.value),
            "name the upstream jobs whose green builds release a version".to_owned(),
        );
    }
    let Some(upstream) = pipeline.jobs.iter().find(|j| j.name.value == name.value) else {
        let names: Vec<&str> = pipeline
            .jobs
            .iter()
            .map(|j| j.name.value.as_str())
            .collect();
        return Some((
            name.pos,
            Problem::UnknownJob,
            format!(
                "`passed` names job `{}`, which the file does not have",
                name.value
            ),
            format!("jobs in this file: {}", names.join(", ")),
        ));
    };
    if resources_got(upstream).iter().any(|r| r == resource) || puts(upstream, resource) {
        return None;
    }
    finding(
        format!(
            "`passed: [{}]` on the get of `{resource}`: job `{}` never gets or puts `{resource}`, so no version could ever pass",
            name.value, name.value
        ),
        format!(
            "add a `get: {resource}` (or a `put:` of it) to job `{}`, or name a job that gets it",
            name.value
        ),
    )
}

/// Whether `job` has a `put:` of `resource` (the version it publishes passes with it).
fn puts(job: &Job, resource: &str) -> bool {
    let mut found = false;
    visit_job(job, &mut |s| {
        found |= matches!(&s.kind, StepKind::Put(super::leaf_step::PutStep { resource: r, .. }) if r.value == resource);
    });
    found
}
