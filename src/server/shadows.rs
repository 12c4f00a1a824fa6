//! Shadow runs through the server: `POST /api/v1/runs/{id}/shadow` runs a finished run's
//! agent steps again (on another model, or as the pipeline says now) with the same code as
//! `treadle run --shadow` ([`crate::shadow::shadow_in_store`]), and keeps the report in the
//! state file ([`crate::shadow::kept`]); `GET /api/v1/runs/{id}/shadows[/{n}]` lists them
//! for the comparison page (`/compare/{id}/shadow/{n}`). A shadow is not a run: it adds no
//! row to the runs, and the source run is only read.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::api::{blocking, load, run_id};
use super::error::ApiError;
use super::shared::App;
use super::start;
use crate::run::{FailureKind, RunStatus, StepFailure};
use crate::shadow::kept::{self, ShadowRecord, ShadowStatus};
use crate::shadow::{ShadowOptions, shadow_in_store};

/// The body of `POST /api/v1/runs/{id}/shadow`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowRequest {
    /// The model every agent step runs on (`provider/model`), as `--model`; absent: each
    /// agent's own, as the pipeline says now.
    #[serde(default)]
    pub model: Option<String>,
}

/// `POST /api/v1/runs/{id}/shadow`: 202 with the shadow's record (`running`) once it has
/// begun; it goes on in the server and its record is written again when it ends.
pub async fn begin(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(req): Json<ShadowRequest>,
) -> Result<(StatusCode, Json<ShadowRecord>), ApiError> {
    let run = run_id(&id)?;
    let record = blocking(&app, move |store| Ok(store.run(run)?)).await?;
    // Its steps and calls are still being written: what a shadow would replay is not final.
    if record.status == RunStatus::Running {
        return Err(ApiError::Conflict(format!(
            "run {run} is still running: shadow it once it has ended"
        )));
    }
    let options = ShadowOptions {
        run,
        state: Some(app.store.path().to_path_buf()),
        model: req.model.clone(),
        agent_file: None,
    };
    crate::shadow::check(&options).map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let served = start::served_of(&app, &record)?;
    let loaded = load(served.file.clone(), None, Default::default()).await?;
    let now = crate::clock::now_ms();
    let model = req.model;
    let begun = blocking(&app, move |store| {
        Ok(kept::begin(&store.database(), run, model, now)?)
    })
    .await?;
    tokio::spawn(finish(app.clone(), loaded, options, begun.clone()));
    Ok((StatusCode::ACCEPTED, Json(begun)))
}

/// Runs the shadow and writes its record again: done with its report, or failed (also when
/// the server shuts down first).
async fn finish(
    app: Arc<App>,
    loaded: crate::pipeline::Loaded,
    options: ShadowOptions,
    mut record: ShadowRecord,
) {
    let ran = tokio::select! {
        r = shadow_in_store(&loaded, &options, app.store.clone()) => {
            r.map_err(|e| StepFailure::new(e.kind(), e.to_string()))
        }
        () = app.shutdown.cancelled() => Err(StepFailure::new(
            FailureKind::Interrupted,
            "the server stopped before it ended",
        )),
    };
    record.ended_ms = Some(crate::clock::now_ms());
    match ran {
        Ok(traced) => {
            record.status = ShadowStatus::Done;
            record.changed = Some(traced.report.changed());
            record.traced = Some(traced);
        }
        Err(failure) => record.set_failure(failure),
    }
    let (run, n) = (record.run, record.n);
    let written = blocking(&app, move |store| {
        Ok(kept::put(&store.database(), &record)?)
    })
    .await;
    if let Err(e) = written {
        tracing::warn!("cannot keep shadow {n} of run {run}: {e}");
    }
}

/// `GET /api/v1/runs/{id}/shadows`: the run's shadows, oldest first.
pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<ShadowRecord>>, ApiError> {
    Ok(Json(shadows_of(&app, run_id(&id)?).await?))
}

/// The shadows of `run`; 404 for a run that does not exist, rather than an empty list.
async fn shadows_of(app: &Arc<App>, run: u64) -> Result<Vec<ShadowRecord>, ApiError> {
    blocking(app, move |store| {
        store.run(run)?;
        Ok(kept::list(&store.database(), run)?)
    })
    .await
}

/// `GET /api/v1/runs/{id}/shadows/{n}`: one shadow of the run.
pub async fn one(
    State(app): State<Arc<App>>,
    Path((id, n)): Path<(String, String)>,
) -> Result<Json<ShadowRecord>, ApiError> {
    let run = run_id(&id)?;
    let n: u32 = n
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{n}` is not a shadow number")))?;
    shadows_of(&app, run)
        .await?
        .into_iter()
        .find(|s| s.n == n)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("run {run} has no shadow {n}")))
}

/// At start-up: the shadows a server that stopped left running will not end; say so.
pub(super) async fn abandon_left(app: &Arc<App>) {
    let now = crate::clock::now_ms();
    let marked = blocking(app, move |store| {
        Ok(kept::abandon_running(&store.database(), now)?)
    })
    .await;
    if let Err(e) = marked {
        tracing::warn!("cannot mark the shadows left running: {e}");
    }
}
