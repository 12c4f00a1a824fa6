//! The checks of the resource keys: `resource_types:` entries, each resource's `type:`,
//! which scripts a get or a put needs, and where `version:` may be written.

use std::collections::BTreeSet;

use super::diagnostic::Finding;
use super::{At, Pipeline, Problem, Step, StepKind, VersionSpec};

/// The resource types treadle has without a `resource_types:` entry.
pub const BUILT_IN: &[&str] = &["git", "time", "slack-mentions", "slack-reply"];

/// Which stages a type has: (`check`, `in`, `out`); `None` when there is no such type.
fn scripts(pipeline: &Pipeline, kind: &str) -> Option<(bool, bool, bool)> {
    if kind == "git" || kind == "time" {
        return Some((true, true, true));
    }
    // A type of the file may take a Slack type's name (it then replaces it).
    let own = pipeline
        .resource_types
        .iter()
        .find(|t| t.name.value == kind)
        .map(|t| t.config.stages());
    own.or(match kind {
        // Get-only and put-only, as `steps` has them.
        "slack-mentions" => Some((true, true, false)),
        "slack-reply" => Some((false, false, true)),
        _ => None,
    })
}

/// Every problem of the resource keys.
pub fn check(pipeline: &Pipeline) -> Vec<Finding> {
    let mut out = super::check_resource_type::check(pipeline);
    let mut seen = BTreeSet::new();
    for t in &pipeline.resource_types {
        let name = t.name.value.as_str();
        if name == "git" || name == "time" {
            out.push((
                t.name.pos,
                Problem::Duplicate,
                format!("resource type `{name}` is built in"),
                "give your type another name".to_owned(),
            ));
        } else if !seen.insert(name) {
            out.push((
                t.name.pos,
                Problem::Duplicate,
                format!("resource type `{name}` is defined twice"),
                "give each resource type its own name".to_owned(),
            ));
        }
    }
    for r in &pipeline.resources {
        if scripts(pipeline, &r.kind.value).is_none() {
            let mut known: Vec<&str> = BUILT_IN.to_vec();
            known.extend(
                pipeline
                    .resource_types
                    .iter()
                    .map(|t| t.name.value.as_str()),
            );
            out.push((
                r.kind.pos,
                Problem::InvalidValue,
                format!(
                    "resource `{}` has type `{}`, which is neither built in nor under `resource_types:`",
                    r.name.value, r.kind.value
                ),
                format!("use one of: {}", known.join(", ")),
            ));
        }
    }
    for job in &pipeline.jobs {
        let mut every = BTreeSet::new();
        for s in &job.plan {
            walk(pipeline, s, true, &mut every, &mut out);
        }
        for (_, h) in job.hooks() {
            walk(pipeline, h, false, &mut every, &mut out);
        }
    }
    out
}

fn walk<'p>(
    pipeline: &'p Pipeline,
    s: &'p At<Step>,
    top: bool,
    every: &mut BTreeSet<&'p str>,
    out: &mut Vec<Finding>,
) {
    step(pipeline, s, top, every, out);
    for c in s.children() {
        walk(pipeline, c, false, every, out);
    }
    for (_, h) in s.hooks() {
        walk(pipeline, h, false, every, out);
    }
}

fn step<'p>(
    pipeline: &'p Pipeline,
    s: &'p At<Step>,
    top: bool,
    every: &mut BTreeSet<&'p str>,
    out: &mut Vec<Finding>,
) {
    let (res, is_get, version) = match &s.kind {
        StepKind::Get(get) => (&get.resource, true, get.version.as_ref()),
        StepKind::Put(put) => (&put.resource, false, None),
        _ => return,
    };
    let Some(resource) = pipeline
        .resources
        .iter()
        .find(|x| x.name.value == res.value)
    else {
        return;
    };
    let Some((has_check, has_in, has_out)) = scripts(pipeline, &resource.kind.value) else {
        return;
    };
    let (script, missing) = if is_get && !has_check {
        ("check", true)
    } else if is_get {
        ("in", !has_in)
    } else {
        ("out", !has_out)
    };
    if missing {
        out.push((
            res.pos,
            Problem::BadStep,
            format!(
                "a {} of `{}` needs its type `{}` to have a `{script}:` stage, and it has none",
                if is_get { "get" } else { "put" },
                res.value,
                resource.kind.value
            ),
            format!("add `{script}:` under the type's `config:`, or remove this step"),
        ));
    }
    if let Some(v) = version
        && v.value == VersionSpec::Every
    {
        if !top {
            out.push((
                v.pos,
                Problem::InvalidValue,
                "`version: every` only works on a get of the job's plan, not inside a block or a hook".to_owned(),
                "move the get to the top of the plan, or use `latest` or a pinned version".to_owned(),
            ));
        } else if !every.insert(res.value.as_str()) {
            out.push((
                v.pos,
                Problem::InvalidValue,
                format!(
                    "a second `version: every` get of `{}` in the same job",
                    res.value
                ),
                "one cursor per job and resource: keep one `every` get of it".to_owned(),
            ));
        }
    }
}
