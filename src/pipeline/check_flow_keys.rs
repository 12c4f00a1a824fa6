//! The checks of the control-flow keys: routes (`to:`, `verdicts:`) and their bounds, `when:`,
//! `race:`, `across:` (its axes, `from_file:` paths, `{{ .vars.NAME }}` uses,
//! `max_in_flight:`, `budget:`), `max_visits:`, and which of them may sit where.
//!
//! Each check returns findings `(position, problem, message, hint)`; [`super::check`]
//! turns them into located diagnostics.

use std::collections::{BTreeMap, BTreeSet};

use super::agent_def::Budget;
use super::at::{At, Pos};
use super::diagnostic::{Finding, Problem, did_you_mean};
use super::flow_keys::{FAILURE_VERDICT, Race, Verdict};
use super::step::Step;
use super::step::StepKind;
use super::step_keys::RunSpec;
use crate::template::TemplateError;

fn finding(
    pos: Pos,
    problem: Problem,
    message: impl Into<String>,
    hint: impl Into<String>,
) -> Finding {
    (pos, problem, message.into(), hint.into())
}

/// Every route (`to:`, `verdicts:`) lands on a step of the job's plan (or `next`), and a
/// backward one is bounded by `max_visits` on either end.
pub fn routes(job: &super::format::Job) -> Vec<Finding> {
    let mut out = Vec::new();
    let names: Vec<String> = job.plan.iter().map(|s| s.display_name()).collect();
    for (index, top) in job.plan.iter().enumerate() {
        let mut routes = Vec::new();
        super::walk::visit_step(top, &mut |s| {
            routes.extend(
                s.all_routes()
                    .into_iter()
                    .map(|(v, t)| (v.to_owned(), t.clone())),
            )
        });
        for (verdict, target) in routes {
            if target.value == "next" {
                continue;
            }
            let Some(to) = names.iter().position(|n| *n == target.value) else {
                let hint = match did_you_mean(&target.value, names.iter().map(String::as_str)) {
                    Some(n) => format!(
                        "did you mean `{n}`? a route goes to a top-level step of job `{}`, or to `next`",
                        job.name.value
                    ),
                    None => format!("route to one of: next, {}", names.join(", ")),
                };
                out.push(finding(
                    target.pos,
                    Problem::MissingRoute,
                    format!(
                        "`{verdict}` routes to `{}`, which is not a step of job `{}`",
                        target.value, job.name.value
                    ),
                    hint,
                ));
                continue;
            };
            // Either end of a backward route may carry the bound: the step that is
            // routed back to (treadle's spelling) or the step routing (steps').
            if to <= index && job.plan[to].max_visits.is_none() && top.max_visits.is_none() {
                out.push(finding(
                    target.pos,
                    Problem::UnboundedLoop,
                    format!(
                        "`{verdict}` routes back to `{}` without a bound",
                        target.value
                    ),
                    format!(
                        "add `max_visits: N` to step `{}` so the loop ends",
                        target.value
                    ),
                ));
            }
        }
    }
    out
}

/// Checks the control-flow keys of every step of a job.
pub fn job(job: &super::format::Job) -> Vec<Finding> {
    let mut out = Vec::new();
    for (key, value) in [
        ("max_in_flight", &job.max_in_flight),
        ("max_consecutive_failures", &job.max_consecutive_failures),
    ] {
        if let Some(v) = value
            && v.value == 0
        {
            out.push(finding(
                v.pos,
                Problem::InvalidValue,
                format!("`{key}` must be at least 1"),
                format!("write `{key}: 1` or more, or leave it out"),
            ));
        }
    }
    if let Some(t) = &job.timeout
        && t.value.0.is_zero()
    {
        out.push(finding(
            t.pos,
            Problem::InvalidValue,
            "a job `timeout` of zero lets no step start",
            "give the job time, e.g. `timeout: 30m`, or leave it out",
        ));
    }
    out.extend(reserve_outside_across(
        job.budget.as_ref(),
        &format!("job `{}`", job.name.value),
    ));
    for s in &job.plan {
        walk(s, true, &mut out);
    }
    for (_, h) in job.hooks() {
        walk(h, false, &mut out);
    }
    out
}

fn walk(s: &At<Step>, top: bool, out: &mut Vec<Finding>) {
    out.extend(step(s, top));
    for c in s.children() {
        walk(c, false, out);
    }
    for (_, h) in s.hooks() {
        walk(h, false, out);
    }
}

/// Checks the control-flow keys of one step. `top`: the step is a step of the job's plan
/// (not nested in a block or a hook), the only place a route can leave from.
pub fn step(step: &At<Step>, top: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let kind = &step.kind;
    if let (Some(w), StepKind::Get(_)) = (&step.when, kind) {
        out.push(finding(
            w.pos,
            Problem::BadStep,
            "`when` does not belong on a `get` step",
            "guard the steps that use what the get fetches instead",
        ));
    }
    if let Some(to) = &step.to {
        if !top {
            out.push(finding(
                to.pos,
                Problem::BadStep,
                "`to` only works on a step of the job's plan, not on one inside a block or a hook",
                "move `to:` to the enclosing top-level step (the block or the `try:`)",
            ));
        }
        if matches!(&step.kind, StepKind::Agent(c) if c.verdicts.is_some()) {
            out.push(finding(
                to.pos,
                Problem::BadStep,
                "a step takes `to:` or `verdicts:`, not both",
                "route an agent's verdicts with `- choice: target` entries, and a failure with `- failure: target`",
            ));
        }
        if to.value.success.is_none() && to.value.failure.is_none() {
            out.push(finding(
                to.pos,
                Problem::MissingKey,
                "`to` names no route",
                "write `to: { success: STEP }` and/or `to: { failure: STEP }`",
            ));
        }
    }
    if let Some(m) = &step.max_visits
        && m.value == 0
    {
        out.push(finding(
            m.pos,
            Problem::InvalidValue,
            "`max_visits` must be at least 1",
            "write how many times the step may run in one run, e.g. `max_visits: 3`",
        ));
    }
    out.extend(verdicts(step));
    if let StepKind::Race(r) = kind {
        out.extend(race(step, r));
    }
    out.extend(across(step));
    out
}

fn verdicts(step: &Step) -> Vec<Finding> {
    let mut out = Vec::new();
    let StepKind::Agent(call) = &step.kind else {
        return out;
    };
    for entry in call.verdicts.iter().flatten() {
        for (name, target) in entry.value.pairs() {
            if name == FAILURE_VERDICT && target.is_none() {
                out.push(finding(
                    entry.pos,
                    Problem::InvalidValue,
                    "the `failure` verdict must name a target",
                    "write `- failure: STEP` (the step to go to when the agent fails or decides nothing), or use `try:` to carry on",
                ));
            }
            if name == "success" {
                out.push(finding(
                    entry.pos,
                    Problem::InvalidValue,
                    "`success` is not a verdict name",
                    "a verdict is already the step's success; name the choice itself, e.g. `approve`",
                ));
            }
        }
        if let Verdict::Route(map) = &entry.value
            && map.is_empty()
        {
            out.push(finding(
                entry.pos,
                Problem::MissingKey,
                "an empty verdict entry",
                "write `- choice` or `- choice: target`",
            ));
        }
    }
    out
}

fn race(step: &At<Step>, race: &Race<Step>) -> Vec<Finding> {
    let mut out = Vec::new();
    if race.steps.len() < 2 {
        out.push(finding(
            step.pos,
            Problem::InvalidValue,
            "`race` needs at least two steps",
            "add another branch, or write the single step without `race:`",
        ));
    }
    let outputs =
        |s: &Step| -> BTreeSet<String> { s.outputs.iter().map(|o| o.value.clone()).collect() };
    if let Some(first) = race.steps.first() {
        let want = outputs(first);
        for s in &race.steps[1..] {
            if outputs(s) != want {
                out.push(finding(
                    s.pos,
                    Problem::BadStep,
                    format!(
                        "race branch `{}` declares other outputs than `{}`",
                        s.display_name(),
                        first.display_name()
                    ),
                    "every branch of a race declares the same `outputs:` (the winner's are the block's)",
                ));
            }
        }
    }
    out
}

/// `reserve_per_cell:` outside an `across:` block (an agent's, a job's or a plain step's
/// `budget:`), where nothing admits cells for it to pace.
pub fn reserve_outside_across(budget: Option<&Budget>, whose: &str) -> Vec<Finding> {
    budget
        .and_then(|b| b.reserve_per_cell.as_ref())
        .map(|r| {
            finding(
                r.pos,
                Problem::BadStep,
                format!("`budget.reserve_per_cell` of {whose} paces nothing"),
                "it only works in the `budget:` of an `across:` step; remove it here",
            )
        })
        .into_iter()
        .collect()
}

/// An `across:` block's `budget:`: tokens only, and a reservation needs a ceiling.
fn across_budget(step: &At<Step>) -> Vec<Finding> {
    let Some(b) = agent_budget(step) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if b.dollars.is_some() {
        out.push(finding(
            step.pos,
            Problem::InvalidValue,
            format!(
                "`budget.usd` on the `across:` step `{}` cannot be shared by its cells",
                step.display_name()
            ),
            "cap the block in `tokens:`; a dollar limit belongs on the agent or the job",
        ));
    }
    if let Some(r) = &b.reserve_per_cell
        && b.tokens.is_none()
    {
        out.push(finding(
            r.pos,
            Problem::MissingKey,
            "`budget.reserve_per_cell` without `budget.tokens` reserves against nothing",
            "add `tokens:` (the block's ceiling) beside it, or remove it",
        ));
    }
    out
}

/// The `budget:` of an agent step (no other kind takes one).
fn agent_budget(step: &Step) -> Option<&Budget> {
    match &step.kind {
        StepKind::Agent(call) => call.budget.as_ref(),
        _ => None,
    }
}

fn across(step: &At<Step>) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(across) = &step.across else {
        out.extend(reserve_outside_across(
            agent_budget(step),
            &format!("step `{}`", step.display_name()),
        ));
        return out;
    };
    let axes = &across.axes;
    out.extend(across_budget(step));
    if axes.value.is_empty() {
        out.push(finding(
            axes.pos,
            Problem::MissingKey,
            "`across` has no axis",
            "add `- var: NAME` with `values: [...]` or `from_file: ARTIFACT/FILE.json`",
        ));
    }
    let mut vars = BTreeSet::new();
    for axis in &axes.value {
        if !vars.insert(axis.var.value.clone()) {
            out.push(finding(
                axis.var.pos,
                Problem::Duplicate,
                format!("`across` names the variable `{}` twice", axis.var.value),
                "give each axis its own `var:`",
            ));
        }
        match (&axis.values, &axis.from_file) {
            (Some(_), Some(f)) => out.push(finding(
                f.pos,
                Problem::BadStep,
                "an axis takes `values:` or `from_file:`, not both",
                "keep one of them",
            )),
            (None, None) => out.push(finding(
                axis.var.pos,
                Problem::MissingKey,
                format!("axis `{}` has no values", axis.var.value),
                "add `values: [a, b]` or `from_file: ARTIFACT/FILE.json`",
            )),
            (Some(v), None) if v.is_empty() => out.push(finding(
                axis.var.pos,
                Problem::InvalidValue,
                format!("axis `{}` has an empty list of values", axis.var.value),
                "list at least one value",
            )),
            (None, Some(f)) => out.extend(from_file(step, f)),
            _ => {}
        }
    }
    if let Some(m) = &across.max_in_flight
        && m.value == 0
    {
        out.push(finding(
            m.pos,
            Problem::InvalidValue,
            "`max_in_flight` must be at least 1",
            "leave it out to run the cells one at a time",
        ));
    }
    let texts = templated_texts(step);
    out.extend(unrenderable(&texts, &vars, axes.pos));
    for used in texts.iter().flat_map(|t| super::flow_keys::vars_used(t)) {
        if !vars.contains(&used) {
            out.push(finding(
                axes.pos,
                Problem::InvalidValue,
                format!("`{{{{ .vars.{used} }}}}` names no variable of `across`"),
                format!(
                    "the variables are: {}",
                    vars.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    out
}

/// The texts of an `across:` step that are not templates the engine reads (a name the
/// axes lack is reported apart, by name).
fn unrenderable(texts: &[String], vars: &BTreeSet<String>, pos: Pos) -> Vec<Finding> {
    let blank: BTreeMap<String, String> = vars.iter().map(|v| (v.clone(), String::new())).collect();
    texts
        .iter()
        .filter_map(|text| match super::flow_keys::render(text, &blank) {
            Err(TemplateError::MissingKey { key, .. }) if key.starts_with(".vars.") => None,
            Err(e) => Some(finding(
                pos,
                Problem::InvalidValue,
                format!("`{text}` cannot be filled in per cell: {e}"),
                "on an `across:` step `{{ }}` is a template: `{{ .vars.NAME }}` is a value, and `{{ \"{{\" }}` writes literal braces",
            )),
            Ok(_) => None,
        })
        .collect()
}

/// The texts of a step `{{ .vars.NAME }}` is replaced in.
fn templated_texts(step: &Step) -> Vec<String> {
    let mut texts = vec![step.display_name()];
    match &step.kind {
        StepKind::Agent(call) => {
            texts.extend(call.prompt.texts().into_iter().map(str::to_owned));
            texts.extend(call.context_paths.iter().flatten().map(|p| p.value.clone()));
        }
        StepKind::Task { run, .. } => match &run.value {
            RunSpec::Shell(line) => texts.push(line.clone()),
            RunSpec::Exec(cfg) => {
                texts.push(cfg.path.clone());
                texts.extend(cfg.args.iter().cloned());
                texts.extend(cfg.dir.clone());
            }
        },
        _ => {}
    }
    texts
}

/// A `load_var:` step names a plain var and a file inside one of its inputs.
pub fn load_var(step: &At<Step>, name: &At<String>, file: Option<&At<String>>) -> Vec<Finding> {
    let plain = !name.value.is_empty()
        && name
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !plain {
        return vec![finding(
            name.pos,
            Problem::InvalidValue,
            format!("`load_var: {}` is not a var name", name.value),
            "use letters, digits, `_`, `-` and `.`, e.g. `load_var: tag`",
        )];
    }
    match file {
        None => vec![finding(
            name.pos,
            Problem::MissingKey,
            format!("`load_var: {}` has no `file:`", name.value),
            "add `file: ARTIFACT/path`, a file inside one of the step's `inputs:`",
        )],
        Some(f) => from_file(step, f)
            .into_iter()
            .map(|(pos, problem, message, hint)| {
                (pos, problem, message.replace("`from_file`", "`file`"), hint)
            })
            .collect(),
    }
}

fn from_file(step: &Step, path: &At<String>) -> Vec<Finding> {
    let p = &path.value;
    if p.starts_with('/') || p.split('/').any(|s| s == "..") || p.is_empty() {
        return vec![finding(
            path.pos,
            Problem::InvalidValue,
            format!("`from_file` path `{p}` leaves the step's directory"),
            "write ARTIFACT/FILE.json, a file inside an input of the step",
        )];
    }
    let artifact = p.split('/').next().unwrap_or_default();
    if !step.inputs.iter().any(|i| i.value == artifact) {
        return vec![finding(
            path.pos,
            Problem::UnproducedInput,
            format!("`from_file` reads `{artifact}`, which is not an input of this step"),
            format!("add `{artifact}` to the step's `inputs:`"),
        )];
    }
    Vec::new()
}
