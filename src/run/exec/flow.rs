//! Control flow around the leaf steps: `when:` guards, `race:` and `across:` (one step
//! run once per combination of values), and the ordering of the execution log for steps
//! that run at once.
//!
//! * A guard runs `sh -c` in a directory of its own holding the step's inputs that exist
//!   (an input an earlier skipped step never wrote is absent, not an error); exit 0 runs
//!   the step, any other exit skips it, and only a command that cannot start is an error.
//! * `race:` starts every branch; the first success wins and cancels the others. The block
//!   fails only when every branch failed.
//! * `across:` runs its step once per cell, the product of the axes with the last varying
//!   fastest, named `step [var=value ...]`. Cells run one at a time unless
//!   `max_in_flight:` says more; a failed cell does not stop the others unless
//!   `fail_fast:`; a `budget:` stops admitting cells once spent (the plan carries on);
//!   `outputs:` are collected per cell under `ARTIFACT/value/value`.

use std::path::PathBuf;

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::{Ctx, Done, Status, worst};
use crate::pipeline::flow_keys::{Across, Race, When};
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, RunSpec, Step, StepKind};
use crate::run::admit::{Admission, Admit};
use crate::run::artifacts::copy_tree;
use crate::run::cell::{Given, cells};
use crate::run::failure::FailureKind;
use crate::run::task::{TaskEnd, TaskSpec, run_task};
use crate::run::transcript::Event;

/// The most items a `from_file:` axis may hold.
pub const MAX_FILE_ITEMS: usize = 1000;
/// The largest file a `from_file:` axis reads (bytes).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A `load_var:` step: reads its file (inside one of its inputs), trimmed, into the var.
pub(crate) async fn load_var<'a>(ctx: &Ctx<'a>, name: &str, file: Option<&At<String>>) -> Done {
    let Some(file) = file else {
        return Done::fail(
            FailureKind::Configuration,
            format!("`load_var: {name}` has no `file:`"),
        );
    };
    let path = &file.value;
    let (artifact, rest) = path.split_once('/').unwrap_or((path, ""));
    let Some(root) = ctx.artifacts.artifact(artifact) else {
        return Done::fail(
            FailureKind::Outputs,
            format!("load_var: no step produced `{artifact}`"),
        );
    };
    let text = match std::fs::metadata(root.join(rest)) {
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return Done::fail(
                FailureKind::Limit,
                format!("load_var: `{path}` is larger than {MAX_FILE_BYTES} bytes"),
            );
        }
        Ok(_) => std::fs::read_to_string(root.join(rest)),
        Err(e) => Err(e),
    };
    match text {
        Ok(t) => {
            ctx.state
                .with(|s| s.vars.insert(name.to_owned(), t.trim().to_owned()));
            Done::ok()
        }
        Err(e) => Done::failed(format!("load_var: cannot read `{path}`: {e}")),
    }
}

/// A task's command with the captured vars filled in.
pub(crate) fn with_vars<'a>(ctx: &Ctx<'a>, run: &RunSpec) -> RunSpec {
    let vars = ctx.state.with(|s| s.vars.clone());
    let fill = |t: &str| crate::pipeline::vars::substitute(t, &vars);
    match run {
        RunSpec::Shell(line) => RunSpec::Shell(fill(line)),
        RunSpec::Exec(cfg) => {
            let mut cfg = cfg.clone();
            cfg.path = fill(&cfg.path);
            cfg.args = cfg.args.iter().map(|a| fill(a)).collect();
            RunSpec::Exec(cfg)
        }
    }
}

/// Why the directory a `when:` guard runs in could not be made from its inputs.
#[derive(Debug, thiserror::Error)]
enum GuardDirError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Copy(#[from] crate::run::artifacts::ArtifactError),
    #[error(transparent)]
    Stopped(#[from] crate::blocking::WorkerStopped),
}

/// Runs a step's `when:` guard: `Ok(true)` when the step runs.
pub(crate) async fn guard<'a>(
    ctx: &Ctx<'a>,
    step: &Step,
    entry: &Entry,
    when: &When,
    cancel: &CancellationToken,
) -> Result<bool, Done> {
    // A guard decided when the step was made (a workflow's branch) starts no process.
    let command = match when {
        When::Decided(decided) => return Ok(decided.taken),
        _ => when.command().unwrap_or_default(),
    };
    let dir = ctx.artifacts.root().join("steps").join(format!(
        "{:03}-guard-{}",
        entry.seq,
        entry.path.replace('/', "_")
    ));
    let inputs: Vec<(String, Option<PathBuf>)> = ctx
        .artifacts
        .inputs_of(step)
        .into_iter()
        .map(|i| {
            let path = ctx.artifacts.artifact(&i);
            (i, path)
        })
        .collect();
    let prepared = {
        let dir = dir.clone();
        crate::blocking::blocking(move || -> Result<(), GuardDirError> {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            for (name, src) in inputs {
                if let Some(src) = src {
                    copy_tree(&src, &dir.join(name), false)?;
                }
            }
            Ok(())
        })
        .await
    };
    if let Err(e) = prepared {
        return Err(Done::fail(
            FailureKind::Infrastructure,
            format!("cannot prepare the `when:` guard: {e}"),
        ));
    }
    let run = RunSpec::Shell(command.to_owned());
    let network = super::leaf::step_network(ctx, step, None);
    let spec = TaskSpec {
        run: &run,
        dir: &dir,
        env: &step.env,
        extra_env: &[],
        pass_env: &step.pass_env,
        confined: step.confined.unwrap_or(true),
        network: &network,
        caches: &[],
    };
    let result = run_task(&spec, None, cancel, &|_, _| {}).await;
    ctx.artifacts.discard(&dir);
    match result {
        Ok(r) => match r.end {
            TaskEnd::Exited(code) => Ok(code == 0),
            TaskEnd::Canceled => Err(ctx.cancelled()),
            TaskEnd::Signaled(_) | TaskEnd::TimedOut(_) => Ok(false),
        },
        Err(e) => Err(Done::fail(
            FailureKind::Infrastructure,
            format!("the `when:` guard could not run: {e}"),
        )),
    }
}

/// `race:`: the first branch to succeed wins; the others are cancelled.
pub(crate) async fn race<'a>(
    ctx: &'a Ctx<'a>,
    entry: &Entry,
    race: &'a Race<Step>,
    cancel: &CancellationToken,
) -> Done {
    let group = cancel.child_token();
    let mark = super::record::log_mark(ctx);
    let mut running: futures::stream::FuturesUnordered<_> = race
        .steps
        .iter()
        .map(|s| ctx.exec(s, group.clone()))
        .collect();
    let mut failures = Vec::new();
    let mut won = false;
    while let Some(d) = running.next().await {
        if d.is_ok() && !won {
            won = true;
            group.cancel();
        } else if !d.is_ok() && !won {
            failures.push(d);
        }
    }
    super::record::order_log(ctx, mark, &entry.path, super::record::Members::Children);
    if ctx.root.is_cancelled() {
        return Done::aborted();
    }
    if won { Done::ok() } else { worst(&failures) }
}

/// Runs an `across:` step: every cell admitted, then the worst outcome among them.
pub(crate) async fn across<'a>(
    ctx: &'a Ctx<'a>,
    (step, across): (&'a At<Step>, &'a Across),
    entry: &Entry,
    cancel: &CancellationToken,
) -> Done {
    let axes = match axes(ctx, across) {
        Ok(a) => a,
        Err(done) => return super::outcome_steps::after_step(ctx, step, done, cancel).await,
    };
    let cells = cells(step, &axes);
    if cells.is_empty() {
        ctx.emit(Event::Notice {
            run: ctx.run,
            text: format!("across: 0 cells for `{}`; nothing to run", entry.name),
        });
        return Done::ok();
    }
    let collect: Vec<String> = step.outputs.iter().map(|o| o.value.clone()).collect();
    if let Err(e) = ctx.artifacts.begin_collection(&collect) {
        return Done::fail(FailureKind::Infrastructure, e.to_string());
    }
    let in_flight = across.max_in_flight.as_ref().map_or(1, |m| m.value.max(1)) as usize;
    let admission = admission(ctx, step, cells.len(), in_flight);
    let spent_before = ctx.state.tokens();
    let spent = || ctx.state.tokens().saturating_sub(spent_before);
    let mark = super::record::log_mark(ctx);
    let total = cells.len();
    let (cells, admission) = (&cells, &admission);
    let spent = &spent;
    let results: Vec<Option<Done>> = futures::stream::iter(0..total)
        .map(|i| {
            let cell = &cells[i];
            async move {
                if cancel.is_cancelled() {
                    return None;
                }
                match admission.admit(i, spent).await {
                    Admit::Go => {}
                    Admit::Closed => return None,
                    Admit::Spent { spent, limit } => {
                        ctx.emit(Event::Notice {
                            run: ctx.run,
                            text: format!(
                                "budget: across stopped before cell {} of {total} (spent {spent} of {limit} tokens)",
                                i + 1
                            ),
                        });
                        return None;
                    }
                }
                if let Some(done) = super::walk::past_deadline(ctx) {
                    admission.close();
                    admission.release();
                    return Some(done);
                }
                let d = ctx.exec_in(step, cancel.clone(), Given::cell(cell)).await;
                admission.release();
                if !d.is_ok() && across.fail_fast {
                    admission.close();
                }
                Some(d)
            }
            .boxed()
        })
        .buffered(in_flight)
        .collect()
        .await;
    super::record::order_log(ctx, mark, &entry.path, super::record::Members::Cells);
    // Steps after the block chain to every cell that ran.
    if let Some(cache) = &ctx.cache {
        let paths: Vec<String> = cells.iter().map(|c| c.entry(entry).path).collect();
        cache.fold_cells(entry.seq, &paths);
    }
    if ctx.root.is_cancelled() {
        return Done::aborted();
    }
    let done: Vec<Done> = results.into_iter().flatten().collect();
    let failed = done
        .iter()
        .filter(|d| d.status != Status::Succeeded)
        .count();
    if failed > 1 {
        return worst(&done).reworded(|first| format!("{failed} cells failed; first: {first}"));
    }
    worst(&done)
}

/// How the block admits its `total` cells: under its `budget: { tokens }`, charging
/// each running cell its reservation (the block's `reserve_per_cell:`, else the cell
/// agent's own `budget.tokens`). Warns when the ceiling can hold nothing back.
fn admission<'a>(ctx: &Ctx<'a>, step: &Step, total: usize, in_flight: usize) -> Admission {
    // Only an agent step has a budget: a task's cells are admitted without one.
    let call = match &step.kind {
        StepKind::Agent(call) => Some(call.as_ref()),
        _ => None,
    };
    let budget = call.and_then(|c| c.budget.as_ref());
    let limit = budget.and_then(|b| b.tokens);
    let reserve = budget
        .and_then(|b| b.reserve_per_cell.as_ref().map(|r| r.value))
        .or_else(|| call?.def.budget.as_ref()?.tokens)
        .unwrap_or(0);
    if limit.is_some() && reserve == 0 && in_flight > 1 && in_flight >= total {
        ctx.emit(Event::Notice {
            run: ctx.run,
            text: format!(
                "budget: `{}` starts all {total} cells at once with nothing reserved per cell, so its token ceiling cannot hold any back (set `reserve_per_cell:`)",
                step.display_name()
            ),
        });
    }
    Admission::new(limit, reserve)
}

/// Each axis's variable and values; a `from_file:` axis reads its artifact now.
fn axes<'a>(ctx: &Ctx<'a>, across: &Across) -> Result<Vec<(String, Vec<String>)>, Done> {
    let mut axes = Vec::new();
    for axis in &across.axes.value {
        let values = match (&axis.values, &axis.from_file) {
            (Some(v), _) => v.iter().map(|s| s.value.0.clone()).collect(),
            (None, Some(path)) => file_axis(ctx, &path.value)?,
            (None, None) => Vec::new(),
        };
        axes.push((axis.var.value.clone(), values));
    }
    Ok(axes)
}

/// The values of a `from_file:` axis: a JSON array of strings in an artifact.
fn file_axis<'a>(ctx: &Ctx<'a>, path: &str) -> Result<Vec<String>, Done> {
    let fail = |why: String| Done::failed(format!("across: from_file `{path}`: {why}"));
    let (artifact, rest) = path.split_once('/').unwrap_or((path, ""));
    let root = ctx
        .artifacts
        .artifact(artifact)
        .ok_or_else(|| fail(format!("no step produced the artifact `{artifact}`")))?;
    let file = root.join(rest);
    let meta = std::fs::metadata(&file).map_err(|e| fail(e.to_string()))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| fail(e.to_string()))?;
    let items: Vec<String> = serde_json::from_str(&text)
        .map_err(|e| fail(format!("not a JSON array of strings ({e})")))?;
    if items.len() > MAX_FILE_ITEMS {
        return Err(fail(format!("more than {MAX_FILE_ITEMS} items")));
    }
    Ok(items)
}
