//! Forking a finished run through the server (`POST /api/v1/runs/{id}/fork`) and the
//! committed turns of an agent step a fork can start from
//! (`GET /api/v1/runs/{id}/steps/{seq}/turns`): the run page's "fork from here".
//!
//! The fork starts as `treadle run --fork RUN --at STEP[/TURN] --prompt TEXT` starts it:
//! [`crate::cache::Start::Fork`] on the same executor (`start::begin`), so the steps before
//! the point come from the parent run, the agent step forks its session in the parent, and
//! the parent is only read. There is no second fork here.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::api::{blocking, load, run_id};
use super::error::ApiError;
use super::shared::App;
use super::start;
use crate::run::RunStatus;

/// The body of `POST /api/v1/runs/{id}/fork`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// `STEP` (before the step's first turn) or `STEP/TURN` (after turn TURN, from 1): the
    /// step by its name or outline path, as `--at` takes it.
    pub at: String,
    /// The message the step goes on with (absent: the step's own prompt), as `--prompt`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Who starts it: `cli`, `web` or `api` (the default).
    #[serde(default)]
    pub trigger: Option<String>,
}

/// `POST /api/v1/runs/{id}/fork`: 201 `{"id": N}` once the fork has begun.
pub async fn fork(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(req): Json<ForkRequest>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let of = run_id(&id)?;
    let trigger = start::trigger_of(req.trigger)?;
    if req.at.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "`at` names the step to fork at: `STEP` or `STEP/TURN`".to_owned(),
        ));
    }
    let record = blocking(&app, move |store| Ok(store.run(of)?)).await?;
    // Its records and sessions are still being written: what a fork would take is not final.
    if record.status == RunStatus::Running {
        return Err(ApiError::Conflict(format!(
            "run {of} is still running: fork it once it has ended"
        )));
    }
    let served = start::served_of(&app, &record)?;
    let remote = start::remote_of(&app, &served.file)?;
    let job = Some(record.job.clone());
    let loaded = load(served.file.clone(), job.clone(), Default::default()).await?;
    let fork = crate::cache::Start::Fork(crate::cache::ForkRun {
        of,
        at: req.at,
        prompt: req.prompt,
    });
    let id = start::begin(&app, loaded, job, remote, fork, trigger).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))))
}

/// The committed turns of one agent step of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnsView {
    /// The run.
    pub run: u64,
    /// The step's outline seq.
    pub seq: u32,
    /// Its outline path.
    pub path: String,
    /// Its name.
    pub step: String,
    /// Its session's committed turns, in order.
    pub turns: Vec<TurnView>,
}

/// One committed turn, and the fork points around it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnView {
    /// Its number, from 1.
    pub turn: u32,
    /// The message it answered (secrets masked).
    pub message: String,
    /// Whether it ended (a fork can go on only after a turn that ended).
    pub ended: bool,
    /// The `at` of a fork that asks this turn again, with another message.
    pub before: String,
    /// The `at` of a fork that goes on after it (`None`: it did not end).
    pub after: Option<String>,
}

/// `GET /api/v1/runs/{id}/steps/{seq}/turns`.
pub async fn turns(
    State(app): State<Arc<App>>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Json<TurnsView>, ApiError> {
    let run = run_id(&id)?;
    let seq: u32 = seq
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{seq}` is not a step number")))?;
    let record = blocking(&app, move |store| Ok(store.run(run)?)).await?;
    // The messages are masked as the transcript masks them: with the pipeline's secrets.
    let served = start::served_of(&app, &record)?;
    let loaded = load(
        served.file.clone(),
        Some(record.job.clone()),
        Default::default(),
    )
    .await?;
    let redactor = crate::run::redactor(&loaded);
    let view = blocking(&app, move |store| read_turns(store, run, seq)).await?;
    Ok(Json(TurnsView {
        turns: view
            .turns
            .into_iter()
            .map(|t| TurnView {
                message: redactor.mask(&t.message),
                ..t
            })
            .collect(),
        ..view
    }))
}

/// The turns of step `seq` of `run`, read from its session in the journal (unmasked).
fn read_turns(store: &crate::run::Store, run: u64, seq: u32) -> Result<TurnsView, ApiError> {
    let step = store
        .steps(run)?
        .into_iter()
        .find(|s| s.seq == seq)
        .ok_or_else(|| ApiError::NotFound(format!("run {run} has no step {seq}")))?;
    if step.kind != "agent" {
        return Err(ApiError::NotFound(format!(
            "step {seq} (`{}`) of run {run} is a {} step: only an agent step has turns",
            step.name, step.kind
        )));
    }
    let row = crate::run::step_sessions::of(&store.database(), run, &step.path)?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "step `{}` of run {run} has no agent session here (it was taken from the cache, or never started)",
            step.name
        ))
    })?;
    let committed = store
        .journal()
        .committed_turns(row.session)
        .map_err(|e| ApiError::Internal(format!("cannot read session {}: {e}", row.session)))?;
    let turns = (1u32..)
        .zip(committed)
        .map(|(n, t)| TurnView {
            turn: n,
            message: t.input.text_content(),
            ended: t.ended,
            // Asking turn 1 again is a fork before the step's first turn; turn N again, a
            // fork after turn N - 1.
            before: match n {
                1 => step.path.clone(),
                _ => format!("{}/{}", step.path, n - 1),
            },
            after: t.ended.then(|| format!("{}/{n}", step.path)),
        })
        .collect();
    Ok(TurnsView {
        run,
        seq,
        path: step.path,
        step: step.name,
        turns,
    })
}
