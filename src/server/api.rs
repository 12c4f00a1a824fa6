//! The JSON API handlers under `/api/v1/`: health, pipelines and their plans, runs (list,
//! show, start, cancel). Approvals are in `approvals.rs`, receipts in `receipt.rs`, the event
//! stream in `sse.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::error::ApiError;
use super::shared::App;
use super::triggers;
use super::views::{PipelineView, RunView, tree};
use crate::pipeline::{CheckScope, Loaded};
use crate::run::Store;

/// Runs `read` on the state file off the async threads.
pub async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    read: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = app.store.clone();
    crate::blocking::blocking(move || read(&store)).await
}

/// Loads a served pipeline as `treadle run` does (its edits since start-up included), with
/// its `((vars))` filled from `vars`.
pub async fn load(
    file: std::path::PathBuf,
    job: Option<String>,
    vars: crate::pipeline::vars::Vars,
) -> Result<Loaded, ApiError> {
    tokio::task::spawn_blocking(move || {
        let scope = CheckScope {
            job: job.as_deref(),
            env: &crate::pipeline::model::process_env,
            machine: false,
        };
        crate::pipeline::load_with_vars(&file, &scope, &vars)
            .map_err(|e| ApiError::Unprocessable(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// `GET /api/v1/health`: ok, or (503) not, with the NATS connection and JetStream's state
/// under `--nats` (steps cannot run without them).
pub(super) async fn health(
    State(app): State<Arc<App>>,
) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    let mut body = serde_json::json!({ "ok": true, "version": env!("CARGO_PKG_VERSION") });
    if let Some(d) = &app.dispatcher {
        let nats = crate::dist::health::check(d.bus()).await;
        body["ok"] = nats.ok().into();
        body["nats"] = serde_json::to_value(&nats).unwrap_or_default();
        body["nats"]["workers"] = serde_json::to_value(d.workers()).unwrap_or_default();
    }
    let code = match body["ok"].as_bool() {
        Some(true) => axum::http::StatusCode::OK,
        _ => axum::http::StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, Json(body))
}

pub(super) async fn pipelines(
    State(app): State<Arc<App>>,
) -> Result<Json<Vec<PipelineView>>, ApiError> {
    let mut out = Vec::new();
    for f in &app.files.files() {
        // A file that does not load now is still served: its jobs are just unknown.
        let vars = super::api_vars::used_in(&f.file);
        let loaded = match load(f.file.clone(), None, Default::default()).await {
            // Its vars are given when a run starts: read it with them left as written.
            Err(_) if !vars.is_empty() => {
                let (file, names) = (f.file.clone(), vars.clone());
                tokio::task::spawn_blocking(move || super::api_vars::load_leaving(&file, &names))
                    .await
                    .ok()
                    .flatten()
            }
            other => other.ok(),
        };
        let jobs = loaded.map_or_else(Vec::new, |l| {
            l.pipeline
                .jobs
                .iter()
                .map(|j| j.name.value.clone())
                .collect()
        });
        out.push(PipelineView {
            name: f.name.clone(),
            file: f.file.display().to_string(),
            jobs,
            vars,
            input_schema: None,
        });
    }
    for w in app.workflows.all() {
        out.push(PipelineView {
            name: w.name().to_owned(),
            file: String::new(),
            jobs: vec![w.name().to_owned()],
            vars: Vec::new(),
            input_schema: Some(w.input_schema().clone()),
        });
    }
    Ok(Json(out))
}

/// What to list.
#[derive(Debug, Deserialize)]
pub(super) struct RunsQuery {
    pipeline: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn runs(
    State(app): State<Arc<App>>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Vec<RunView>>, ApiError> {
    let list = blocking(&app, move |store| {
        let triggers = triggers::all(&store.database())?;
        let approvals = store.approvals()?;
        let mut out = Vec::new();
        for r in store.runs()?.into_iter().rev() {
            let mut view = RunView::of(&r, &store.steps(r.id)?, trigger(&triggers, r.id));
            view.forked_from = forked_from(&store.database(), r.id);
            view.waiting = waiting(&approvals, &r);
            if q.pipeline.as_ref().is_none_or(|p| *p == view.pipeline) {
                out.push(view);
            }
            if q.limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
        Ok(out)
    })
    .await?;
    Ok(Json(list.into_iter().map(|v| stood(&app, v)).collect()))
}

/// The view with `interrupted` set: running by its record, but not in this process (which
/// holds the state file, so no other process runs it).
fn stood(app: &App, mut view: RunView) -> RunView {
    view.interrupted =
        view.status == crate::run::RunStatus::Running && app.live_run(view.id).is_none();
    view
}

/// What a running run waits on (a person's approval or answer), from the approvals.
fn waiting(
    approvals: &[crate::run::state::ApprovalRecord],
    run: &crate::run::state::RunRecord,
) -> Option<crate::run::waiting::Waiting> {
    (run.status == crate::run::RunStatus::Running)
        .then(|| crate::run::waiting::Waiting::of_run(approvals, run.id))
        .flatten()
}

/// Who started run `id`: what the server recorded, else `cli` (a run of `treadle run`
/// made without a server).
fn trigger(triggers: &HashMap<u64, String>, id: u64) -> &str {
    triggers.get(&id).map_or("cli", String::as_str)
}

/// Parses a run id from the path: a clear 400 instead of axum's plain-text rejection.
pub fn run_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "`{text}` is not a run id: run ids are whole numbers (see GET /api/v1/runs)"
        ))
    })
}

pub(super) async fn run(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let id = run_id(&id)?;
    let view = blocking(&app, move |store| {
        let record = store.run(id)?;
        let steps = store.steps(id)?;
        let triggers = triggers::all(&store.database())?;
        let mut view = RunView::of(&record, &steps, trigger(&triggers, id));
        view.steps = Some(tree(&steps));
        view.forked_from = forked_from(&store.database(), id);
        view.waiting = waiting(&store.approvals()?, &record);
        Ok(view)
    })
    .await?;
    Ok(Json(stood(&app, view)))
}

pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let id = run_id(&id)?;
    match app.live_run(id) {
        Some(live) => {
            live.cancel.cancel();
            Ok((
                StatusCode::ACCEPTED,
                Json(serde_json::json!({ "id": id, "status": "aborting" })),
            ))
        }
        None => {
            let record = blocking(&app, move |store| Ok(store.run(id)?)).await?;
            Err(ApiError::Conflict(format!(
                "run {id} is not running here (it is {})",
                record.status.as_str()
            )))
        }
    }
}

/// Which job to plan.
#[derive(Debug, Deserialize)]
pub(super) struct PlanQuery {
    job: Option<String>,
}

/// `treadle plan` as the server sees it: the text it prints, per job.
pub(super) async fn plan(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(q): Query<PlanQuery>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let file = app
        .file(&name)
        .ok_or_else(|| not_served(&app, &name))?
        .file
        .clone();
    let loaded = load(file, q.job.clone(), Default::default()).await?;
    let out = blocking(&app, move |store| {
        let records = crate::cache::records::Records::open(store.database())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut out = Vec::new();
        for j in loaded
            .pipeline
            .jobs
            .iter()
            .filter(|j| q.job.as_ref().is_none_or(|n| j.name.value == *n))
        {
            let lines = crate::cache::plan::plan(&loaded, j, Some(&records));
            let mut plan = crate::cache::plan::to_json(&j.name.value, &lines);
            plan["text"] = crate::cache::plan::render(&j.name.value, &lines).into();
            out.push(plan);
        }
        Ok(out)
    })
    .await?;
    Ok(Json(out))
}

/// The 404 for a pipeline name the server does not serve, listing those it does.
pub fn not_served(app: &App, name: &str) -> ApiError {
    let files = app.files.files();
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    ApiError::NotFound(format!(
        "no pipeline `{name}` is served here; served: {}",
        names.join(", ")
    ))
}

/// The fork link of run `id`, as the API shows it.
fn forked_from(db: &redb::Database, id: u64) -> Option<super::views::ForkedFrom> {
    crate::cache::records::forked_from(db, id).map(|(run, at)| super::views::ForkedFrom { run, at })
}
