//! `version: every` in a run: the plan from the first `every` get on runs once per *input
//! set*, Concourse's model. Each `every` get advances one version per set through the
//! versions its job has not taken yet (each taken when its set starts, durably, so a later
//! run does not take it again); a get whose versions ran out holds at the newest version
//! it took, while the others move on. No cross product: three new versions of one input
//! and two of another make three sets. A failed set does not stop the ones after it.

use std::collections::HashMap;

use super::{Ctx, Done, Status};
use crate::pipeline::{At, Step, StepKind, TypedResource, VersionSpec};
use crate::resource::check::Checker;
use crate::run::failure::FailureKind;

/// Where the plan's first top-level `every` get is, if it has one.
pub(crate) fn first_every(plan: &[At<Step>]) -> Option<usize> {
    plan.iter().position(|s| s.is_every_get())
}

/// The `every` gets of the plan from `start`: (outline seq, resource).
fn every_gets<'p>(ctx: &Ctx<'_>, plan: &'p [At<Step>]) -> Vec<(u32, &'p TypedResource)> {
    plan.iter()
        .filter(|s| s.is_every_get())
        .filter_map(|s| match (&s.kind, ctx.outline.entry(s)) {
            (StepKind::Get(crate::pipeline::GetStep { typed, .. }), Some(e)) => {
                Some((e.seq, typed.as_ref()))
            }
            _ => None,
        })
        .collect()
}

/// Runs the plan with its `every` gets, the first at `start`: the steps before it once,
/// then the rest once per input set.
pub(crate) async fn walk_every<'a>(ctx: &'a Ctx<'a>, start: usize) -> Done {
    let plan = &ctx.job.plan;
    let before = super::walk::walk(ctx, 0, start).await;
    if !before.is_ok() {
        ctx.skip(&plan[start..]);
        return before;
    }
    let gets = every_gets(ctx, &plan[start..]);
    let checker = match Checker::new(
        ctx.loaded,
        ctx.store.database(),
        ctx.artifacts.root().join("checks"),
    ) {
        Ok(c) => c,
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let job = ctx.job.name.value.as_str();
    let mut held: HashMap<u32, Option<String>> = HashMap::new();
    let forcing = ctx.mode.forcing();
    for &(seq, typed) in &gets {
        let resource = typed.name();
        // `--force` ignores what was taken before; what it takes is recorded again.
        if forcing && let Err(e) = checker.history().rewind(job, resource) {
            return Done::fail(FailureKind::Infrastructure, e.to_string());
        }
        if let Err(e) = checker.check_without_cursor(typed, &ctx.root).await {
            ctx.skip(&plan[start..]);
            return Done::fail(FailureKind::Infrastructure, e.to_string());
        }
        let last = checker.history().last_taken(job, resource);
        let last = match last {
            Ok(v) => v.map(|v| typed.version_text(&v)),
            Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
        };
        held.insert(seq, last);
    }
    let mut result = Done::ok();
    let mut sets = 0;
    loop {
        let mut moved = false;
        for &(seq, typed) in &gets {
            match checker.next_version(job, typed.name(), &VersionSpec::Every) {
                Ok(Some(v)) => {
                    held.insert(seq, Some(typed.version_text(&v)));
                    moved = true;
                }
                Ok(None) => {}
                Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
            }
        }
        if !moved {
            break;
        }
        let missing: Vec<&str> = gets
            .iter()
            .filter(|(seq, _)| held.get(seq).is_none_or(Option::is_none))
            .map(|(_, r)| r.name())
            .collect();
        if !missing.is_empty() {
            crate::console::tell!(
                "treadle: cannot build: no versions exist for {}",
                missing.join(", ")
            );
            break;
        }
        let decided = held
            .iter()
            .filter_map(|(k, v)| Some((*k, v.clone()?)))
            .collect();
        ctx.state.with(|s| s.every_versions = decided);
        sets += 1;
        let d = super::walk::walk(ctx, start, plan.len()).await;
        if d.status == Status::Aborted {
            return d;
        }
        if !d.is_ok() && result.is_ok() {
            result = d;
        }
    }
    if sets == 0 {
        let names: Vec<&str> = gets.iter().map(|(_, r)| r.name()).collect();
        crate::console::tell!(
            "treadle: job `{job}` has no new versions of {} (each was taken already); the {} step(s) from the `every` get on did not run",
            names.join(", "),
            plan.len() - start
        );
        ctx.skip(&plan[start..]);
    }
    result
}
