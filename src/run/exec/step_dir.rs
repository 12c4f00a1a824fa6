//! A leaf step's own directory: prepared with its inputs (mapped artifacts under the names
//! the step uses), then concluded: its asserts checked and its outputs collected (a cell's
//! into its place in the block's artifact).

use super::{Ctx, Done};
use crate::assert::{self, StepFacts};
use crate::pipeline::Step;
use crate::pipeline::at::values;
use crate::pipeline::outline::Entry;
use crate::run::artifacts::ArtifactError;
use crate::run::cell::Cell;
use crate::run::failure::FailureKind;
use std::path::{Path, PathBuf};

pub(crate) async fn prepare<'a>(
    ctx: &Ctx<'a>,
    step: &Step,
    entry: &Entry,
    attempt: u32,
) -> Result<PathBuf, Done> {
    let (inputs, outputs) = (values(&step.inputs), values(&step.outputs));
    // Cells of one step share its number; their index keeps their directories apart.
    let name = match entry.cell {
        Some(cell) => format!("c{cell}-{}", entry.name),
        None => entry.name.clone(),
    };
    let (ws, seq) = (ctx.artifacts.clone(), entry.seq);
    // A `--rerun` of a step that kept its outputs when it failed starts from them.
    let start = super::kept::starting_state(ctx, step, entry, attempt).await;
    let result = tokio::task::spawn_blocking(move || {
        let dir = ws.prepare(seq, &name, attempt, &inputs, &outputs)?;
        match &start {
            Some(start) => start.put_in(&dir).map(|()| dir),
            None => Ok(dir),
        }
    })
    .await
    .unwrap_or_else(|e| {
        Err(ArtifactError::Io {
            what: "cannot prepare",
            path: PathBuf::new(),
            source: std::io::Error::other(e.to_string()),
        })
    });
    // A mapped artifact is shown under the name the command uses.
    let result = result.and_then(|dir| {
        remount(&dir, &step.mounts(), false)?;
        Ok(dir)
    });
    result.map_err(|e| match e {
        ArtifactError::MissingInput(_)
        | ArtifactError::MissingOutput(_)
        | ArtifactError::ReplacedOutput(_) => Done::fail(FailureKind::Outputs, e.to_string()),
        ArtifactError::Io { .. } | ArtifactError::BadName { .. } => {
            Done::fail(FailureKind::Infrastructure, e.to_string())
        }
    })
}

/// Checks asserts, then collects outputs; the directory is removed when all went well.
pub(crate) async fn conclude<'a>(
    ctx: &Ctx<'a>,
    step: &Step,
    dir: &Path,
    facts: StepFacts<'_>,
    cell: Option<&Cell>,
) -> Done {
    if let Some(assert) = &step.assert {
        let failures = assert::check_step(&assert.value, &facts);
        if !failures.is_empty() {
            return Done::asserts_failed("assert", failures);
        }
    }
    let outputs = values(&step.outputs);
    if let Err(e) = remount(dir, &step.mounts(), true) {
        return Done::fail(FailureKind::Infrastructure, e.to_string());
    }
    let (ws, owned) = (ctx.artifacts.clone(), dir.to_path_buf());
    // A cell of an `across:` step collects into its place in the block's artifact.
    let cell = cell
        .filter(|_| !outputs.is_empty())
        .map(|c| c.segments().to_vec());
    let collected = tokio::task::spawn_blocking(move || match cell {
        Some(segments) => ws.collect_cell(&owned, &outputs, &segments),
        None => ws.collect(&owned, &outputs),
    })
    .await
    .unwrap_or_else(|e| {
        Err(ArtifactError::Io {
            what: "cannot collect",
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
    });
    match collected {
        Ok(()) => {
            // An agent step's directory stays until the run has ended: until its
            // record says it succeeded (a durable write after this), a process stopped
            // here goes on in its session, in that directory (`continued`).
            if !matches!(&step.kind, crate::pipeline::StepKind::Agent(_)) {
                ctx.artifacts.discard(dir);
            }
            Done::ok()
        }
        Err(e @ ArtifactError::Io { .. }) => Done::fail(FailureKind::Infrastructure, e.to_string()),
        Err(e) => Done::fail(FailureKind::Outputs, e.to_string()),
    }
}

/// Renames each mapped artifact's directory in `dir` to the name the step uses, or back
/// (`back`) before its outputs are collected.
pub(crate) fn remount(
    dir: &Path,
    mounts: &[(String, String)],
    back: bool,
) -> Result<(), ArtifactError> {
    for (artifact, inner) in mounts {
        let (from, to) = match back {
            false => (dir.join(artifact), dir.join(inner)),
            true => (dir.join(inner), dir.join(artifact)),
        };
        if from.exists() && !to.exists() {
            std::fs::rename(&from, &to).map_err(|source| ArtifactError::Io {
                what: "cannot rename",
                path: from.clone(),
                source,
            })?;
        }
    }
    Ok(())
}
