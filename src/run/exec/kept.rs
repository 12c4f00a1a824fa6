//! `keep_on_failure: true`: the outputs of a task or agent step that failed, kept for
//! inspection and as the starting state of a `--rerun` of that step.
//!
//! * When such a step fails (or errors: not when it is interrupted, which `--resume` goes on
//!   from), each declared output as its last attempt left it is copied to
//!   `<run>/kept/<step>/<output>/`, the step's record says so ([`Kept`]), and a note tells
//!   where and how to start again from it.
//! * `treadle run --rerun STEP` starts STEP from the outputs the newest earlier run of the
//!   same job and file kept of it, provided STEP did not run again since (then what it kept
//!   is out of date): each output directory begins as the kept copy instead of empty (or
//!   instead of the input of the same name). The step's record names that run
//!   (`from_kept`).
//! * Kept outputs are never a cache hit: a failed step is not stored, and a step that started
//!   from kept outputs read something its key does not cover, so its outcome is not stored
//!   either (the next ordinary run runs it again).
//!
//! The copies live in the run's directory, so they go when it is pruned (the newest 20 runs'
//! directories are kept); a rerun whose kept copy is gone says so and starts afresh.

use std::path::{Path, PathBuf};

use super::{Ctx, Done, Status};
use crate::pipeline::Step;
use crate::pipeline::outline::Entry;
use crate::run::artifacts::{ArtifactError, copy_tree, dir_name};
use crate::run::state::{StateError, StepRecord, StepStatus, Store};
use crate::run::state_records::Kept;
use crate::run::transcript::Event;

/// Why a step's outputs could not be kept, or a rerun not started from them.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    /// Copying a tree.
    #[error(transparent)]
    Copy(#[from] ArtifactError),
    /// Reading the earlier runs' records.
    #[error(transparent)]
    State(#[from] StateError),
    /// The blocking task doing the copy did not finish.
    #[error("the copy stopped: {}", .0.0)]
    Stopped(#[from] crate::blocking::WorkerStopped),
}

/// The directory run `run_root`'s kept outputs of step `name` go to.
fn kept_dir(run_root: &Path, name: &str) -> PathBuf {
    run_root.join("kept").join(dir_name(name))
}

/// Keeps the outputs of a step that ended `done`, when it asked to and failed: copied out of
/// its last attempt's directory, recorded, and told. A copy that fails is told and leaves
/// the step as it ended.
pub(crate) async fn keep_failed(ctx: &Ctx<'_>, step: &Step, entry: &Entry, done: &Done) {
    let asked = step.keep_on_failure.as_ref().is_some_and(|k| k.value);
    let failed = matches!(done.status, Status::Failed | Status::Errored);
    if !asked || !failed || entry.cell.is_some() {
        return;
    }
    let attempt = ctx
        .state
        .with(|s| s.records.get(entry.seq as usize).map(|r| r.attempts))
        .unwrap_or(1)
        .max(1);
    let from = ctx.artifacts.step_dir(entry.seq, &entry.name, attempt);
    let to = kept_dir(ctx.artifacts.root(), &entry.name);
    let outputs = produced(step);
    let copied =
        crate::blocking::blocking(move || copy_out(&from, &to, &outputs).map_err(KeptError::from))
            .await;
    let outputs = match copied {
        Ok(o) if !o.is_empty() => o,
        Ok(_) => {
            notice(
                ctx,
                format!("`{}` failed with no outputs left to keep", entry.name),
            );
            return;
        }
        Err(e) => {
            notice(
                ctx,
                format!("cannot keep the outputs of `{}`: {e}", entry.name),
            );
            return;
        }
    };
    let state_dir = ctx.store.path().parent().unwrap_or(Path::new("."));
    let dir = kept_dir(ctx.artifacts.root(), &entry.name);
    let shown = dir.strip_prefix(state_dir).unwrap_or(&dir).to_path_buf();
    let kept = Kept {
        dir: shown.display().to_string(),
        outputs: outputs.clone(),
    };
    super::record::update(ctx, entry.seq, move |r| r.kept = Some(kept)).await;
    notice(
        ctx,
        format!(
            "`{}` failed; its outputs ({}) are kept in {} (keep_on_failure): `{} --rerun {}` starts it from them",
            entry.name,
            outputs.join(", "),
            dir.display(),
            super::blame::run_command(ctx),
            super::blame::shell_word(&entry.name),
        ),
    );
}

/// The outputs a step's directory holds under the names the step wrote them (a mapped
/// output under its inner name), copied to `to` under their artifact names.
fn copy_out(
    from: &Path,
    to: &Path,
    outputs: &[(String, String)],
) -> Result<Vec<String>, ArtifactError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|source| ArtifactError::Io {
            what: "cannot clear",
            path: to.to_path_buf(),
            source,
        })?;
    }
    let mut kept = Vec::new();
    for (artifact, inner) in outputs {
        let src = [from.join(inner), from.join(artifact)]
            .into_iter()
            .find(|p| p.is_dir());
        if let Some(src) = src {
            copy_tree(&src, &to.join(artifact), true)?;
            kept.push(artifact.clone());
        }
    }
    Ok(kept)
}

/// Each declared output with the name the step itself sees it under.
fn produced(step: &Step) -> Vec<(String, String)> {
    let mounts = step.mounts();
    step.outputs
        .iter()
        .map(|o| {
            let inner = mounts
                .iter()
                .find(|(a, _)| *a == o.value)
                .map_or_else(|| o.value.clone(), |(_, i)| i.clone());
            (o.value.clone(), inner)
        })
        .collect()
}

/// The outputs a `--rerun` of a step starts from: those an earlier run kept in `dir`.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    dir: PathBuf,
    outputs: Vec<String>,
}

impl Start {
    /// Puts the kept outputs in place of the output directories `dir` was prepared with
    /// (under their artifact names, before they are renamed to the names the step uses).
    pub(crate) fn put_in(&self, dir: &Path) -> Result<(), ArtifactError> {
        for artifact in &self.outputs {
            let (src, dest) = (self.dir.join(artifact), dir.join(artifact));
            if !src.is_dir() {
                continue;
            }
            if dest.exists() {
                std::fs::remove_dir_all(&dest).map_err(|source| ArtifactError::Io {
                    what: "cannot clear",
                    path: dest.clone(),
                    source,
                })?;
            }
            copy_tree(&src, &dest, true)?;
        }
        Ok(())
    }
}

/// Where a `--rerun` of `entry` starts from, when this run reruns it, it asked to keep its
/// outputs and an earlier run kept them; recorded in its record (`from_kept`) and told at
/// its first attempt.
pub(crate) async fn starting_state(
    ctx: &Ctx<'_>,
    step: &Step,
    entry: &Entry,
    attempt: u32,
) -> Option<Start> {
    let asked = step.keep_on_failure.as_ref().is_some_and(|k| k.value);
    let reruns = ctx.mode.reruns(entry.seq);
    if !asked || !reruns || entry.cell.is_some() {
        return None;
    }
    let (store, run, name) = (ctx.store.clone(), ctx.run, entry.name.clone());
    let found =
        crate::blocking::blocking(move || latest_kept(&store, run, &name).map_err(KeptError::from))
            .await;
    let (of, kept) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return None,
        Err(e) => {
            notice(
                ctx,
                format!("cannot look for the outputs `{}` kept: {e}", entry.name),
            );
            return None;
        }
    };
    let state_dir = ctx.store.path().parent().unwrap_or(Path::new("."));
    let dir = state_dir.join(&kept.dir);
    if !dir.is_dir() {
        notice(
            ctx,
            format!(
                "the outputs run {of} kept of `{}` are gone ({} was pruned); it starts afresh",
                entry.name,
                dir.display()
            ),
        );
        return None;
    }
    super::record::update(ctx, entry.seq, move |r| r.from_kept = Some(of)).await;
    if attempt == 1 {
        let text = format!(
            "`{}` starts from the outputs ({}) it kept when it failed in run {of}",
            entry.name,
            kept.outputs.join(", ")
        );
        notice(ctx, text);
    }
    Some(Start {
        dir,
        outputs: kept.outputs,
    })
}

/// The newest run before `run`, of its job and pipeline file, in which step `name` ran:
/// what it kept of the step, if it kept anything.
fn latest_kept(store: &Store, run: u64, name: &str) -> Result<Option<(u64, Kept)>, StateError> {
    let this = store.run(run)?;
    let earlier = store
        .runs()?
        .into_iter()
        .rev()
        .filter(|r| r.id < run && r.job == this.job && r.pipeline == this.pipeline);
    for r in earlier {
        let steps = store.steps(r.id)?;
        let Some(s) = steps.iter().find(|s| s.name == name && ran(s)) else {
            continue;
        };
        return Ok(s.kept.clone().map(|k| (r.id, k)));
    }
    Ok(None)
}

/// Whether a step's record says it ran in its run (a replay from the cache counts: what it
/// brought back is newer than anything kept before).
fn ran(s: &StepRecord) -> bool {
    !matches!(s.status, StepStatus::Pending | StepStatus::Skipped)
}

/// Whether `entry` started from kept outputs in this run (its outcome is then not stored).
pub(crate) fn started_from_kept(ctx: &Ctx<'_>, entry: &Entry) -> bool {
    ctx.state
        .with(|s| {
            s.records
                .get(entry.seq as usize)
                .map(|r| r.from_kept.is_some())
        })
        .unwrap_or(false)
}

fn notice(ctx: &Ctx<'_>, text: String) {
    ctx.emit(Event::Notice { run: ctx.run, text });
}
