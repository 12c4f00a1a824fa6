//! Starting a run in the server (`POST /api/v1/runs`): it runs in this process, on the same
//! executor as `treadle run`, journaled and followed live; the answer waits only until the
//! run has its id.
//!
//! At start-up the server also adopts the runs a stopped process left running
//! ([`adopt_all`]): it holds the state file's lock, so a run still marked running has no
//! live process. Each goes on under its own id, its transcript continuing from the last
//! journaled event, so a follower reconnecting with `Last-Event-ID` picks up where it was.
//! A run of the trigger queue is left to the watcher, which resumes it before its next
//! build; one whose pipeline is no longer served, or no longer loads, stays interrupted.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::api::{blocking, not_served};
use super::error::ApiError;
use super::shared::{App, LiveRun};
use super::triggers;
use crate::run::{RunOptions, Served, Style};

/// The body of `POST /api/v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The served pipeline's name.
    pub pipeline: String,
    /// The job (default: the only one).
    #[serde(default)]
    pub job: Option<String>,
    /// Pipeline vars: each `((name))` in the file becomes its value (as `--var`).
    #[serde(default)]
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// Who starts it: `cli`, `web` or `api` (the default).
    #[serde(default)]
    pub trigger: Option<String>,
    /// A step (its name or outline path) to run again with what depends on it, even when
    /// cached, as `treadle run --rerun STEP` does; the run page's "run again from here".
    #[serde(default)]
    pub rerun: Option<String>,
    /// A workflow written in Rust's typed input, checked against its schema (`code.rs`);
    /// a pipeline file takes `vars` instead.
    #[serde(default)]
    pub input: Option<serde_json::Value>,
}

/// `POST /api/v1/runs`: 201 `{"id": N}` once the run has begun.
pub async fn start(
    State(app): State<Arc<App>>,
    Json(req): Json<StartRequest>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let trigger = trigger_of(req.trigger.clone())?;
    if let Some(workflow) = app.workflows.get(&req.pipeline) {
        if req.job.is_some() || !req.vars.is_empty() || req.rerun.is_some() {
            return Err(ApiError::BadRequest(format!(
                "`{}` is a workflow written in Rust: it takes `input`, not `job`, `vars` or `rerun`",
                req.pipeline
            )));
        }
        return super::code::start(&app, workflow, req.input, trigger).await;
    }
    if req.input.is_some() {
        return Err(ApiError::BadRequest(format!(
            "`{}` is a pipeline file: it takes `vars`, not `input` (the input of a workflow written in Rust)",
            req.pipeline
        )));
    }
    let vars = vars_of(&req.vars)?;
    let served = app
        .file(&req.pipeline)
        .ok_or_else(|| not_served(&app, &req.pipeline))?;
    let remote: Option<Arc<dyn crate::run::exec::RemoteSteps>> = match &app.dispatcher {
        // Workers load the file's text; API vars are never spliced into it.
        Some(_) if !vars.is_empty() => {
            return Err(ApiError::Unprocessable(
                "vars given over the API cannot reach `treadle worker` processes yet (--nats): workers load the pipeline's text, and an API var is never spliced into it\nhint: run this pipeline on a server without --nats, or give the value on the worker's side".to_owned(),
            ));
        }
        Some(d) => Some(d.for_run(source_of(&served.file)?)),
        None => None,
    };
    let loaded = load_with_data(served.file.clone(), req.job.clone(), vars).await?;
    loaded
        .job(req.job.as_deref())
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let start = match req.rerun {
        Some(step) => crate::cache::Start::Rerun(step),
        None => crate::cache::Start::Fresh,
    };
    let id = begin(&app, loaded, req.job, remote, start, trigger).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))))
}

/// Who starts a run, as a request names it: `cli`, `web` or `api` (the default).
pub(super) fn trigger_of(given: Option<String>) -> Result<String, ApiError> {
    let trigger = given.unwrap_or_else(|| "api".to_owned());
    if !["cli", "web", "api"].contains(&trigger.as_str()) {
        return Err(ApiError::BadRequest(format!(
            "trigger `{trigger}`: expected `cli`, `web` or `api`"
        )));
    }
    Ok(trigger)
}

/// Starts `loaded`'s `job` in this process as `start` says, records who started it, and
/// answers its id once it has begun (or why it could not).
pub(super) async fn begin(
    app: &Arc<App>,
    loaded: crate::pipeline::Loaded,
    job: Option<String>,
    remote: Option<Arc<dyn crate::run::exec::RemoteSteps>>,
    start: crate::cache::Start,
    trigger: String,
) -> Result<u64, ApiError> {
    let (begun, begun_id) = super::begun::channel();
    let options = RunOptions {
        job,
        style: Style::Quiet,
        state: None,
        cancel: app.shutdown.child_token(),
        versions: Default::default(),
    };
    launch(app, loaded, options, remote, How::Start(start), begun);
    let id = begun_id.id("began").await?;
    blocking(app, move |store| {
        Ok(triggers::set(&store.database(), id, &trigger)?)
    })
    .await?;
    Ok(id)
}

/// How a launched run starts: a new run (fresh, or with `--rerun`), or going on with a run
/// a stopped process left running.
enum How {
    Start(crate::cache::Start),
    Adopt(u64),
}

/// Runs `loaded` in this process as `how` says; `begun` is told its id.
fn launch(
    app: &Arc<App>,
    loaded: crate::pipeline::Loaded,
    options: RunOptions,
    remote: Option<Arc<dyn crate::run::exec::RemoteSteps>>,
    how: How,
    begun: super::begun::Begun,
) {
    let cancel = options.cancel.clone();
    let on_begin = {
        let (app, begun) = (app.clone(), begun.clone());
        Box::new(
            move |id: u64, journal: Arc<crate::run::event_log::EventLog>| {
                if let Some(d) = &app.dispatcher {
                    crate::dist::events::mirror(
                        d.bus().clone(),
                        d.server().to_owned(),
                        app.store.database(),
                        journal.clone(),
                    );
                }
                if let Ok(mut live) = app.live.lock() {
                    live.insert(id, LiveRun { journal, cancel });
                }
                begun.answer(Ok(id));
            },
        )
    };
    let task_app = app.clone();
    tokio::spawn(async move {
        let (store, agents) = (task_app.store.clone(), task_app.agents.clone());
        let served = Some(Served { on_begin, remote });
        let report = match how {
            How::Start(start) => {
                crate::run::run_served(&loaded, options, store, agents, &start, served).await
            }
            How::Adopt(id) => {
                crate::run::adopt_served(&loaded, options, store, agents, id, served).await
            }
        };
        match report {
            Ok(r) => {
                if let Ok(mut live) = task_app.live.lock() {
                    live.remove(&r.run);
                }
            }
            Err(e) => begun.answer(Err(ApiError::Unprocessable(e.to_string()))),
        }
    });
}

/// Adopts every run a stopped process left running (see the module's docs), each going on
/// in this process; those it cannot are said and left as they are.
pub async fn adopt_all(app: &Arc<App>) {
    let orphans = blocking(app, |store| {
        let queued: std::collections::HashSet<u64> = crate::watch::store::queue(&store.database())?
            .into_iter()
            .filter_map(|q| q.run)
            .collect();
        Ok(store
            .runs()?
            .into_iter()
            .filter(|r| r.status == crate::run::RunStatus::Running && !queued.contains(&r.id))
            .collect::<Vec<_>>())
    })
    .await;
    let orphans = match orphans {
        Ok(o) => o,
        Err(e) => {
            crate::console::tell!("treadle serve: cannot look for interrupted runs: {e}");
            return;
        }
    };
    for run in orphans {
        if let Some(workflow) = app.workflows.get(&run.pipeline) {
            match super::code::resume(app, workflow, &run).await {
                Ok(new) => crate::console::tell!(
                    "treadle serve: run {} (workflow `{}`) was left running by a process that stopped; run {new} resumes it",
                    run.id,
                    run.pipeline
                ),
                Err(e) => crate::console::tell!(
                    "treadle serve: run {} (workflow `{}`) stays interrupted: {e}",
                    run.id,
                    run.pipeline
                ),
            }
            continue;
        }
        match adopt(app, &run).await {
            Ok(()) => crate::console::tell!(
                "treadle serve: run {} (`{}`) was left running by a process that stopped; it goes on here",
                run.id,
                run.job
            ),
            Err(e) => crate::console::tell!(
                "treadle serve: run {} stays interrupted (resume it with `treadle run --resume {}`): {e}",
                run.id,
                run.id
            ),
        }
    }
}

/// Goes on with `run` here, once its pipeline loads.
async fn adopt(app: &Arc<App>, run: &crate::run::state::RunRecord) -> Result<(), ApiError> {
    let served = served_of(app, run)?;
    let remote = remote_of(app, &served.file)?;
    let loaded = super::api::load(
        served.file.clone(),
        Some(run.job.clone()),
        Default::default(),
    )
    .await?;
    let (begun, begun_id) = super::begun::channel();
    let options = RunOptions {
        job: Some(run.job.clone()),
        style: Style::Quiet,
        state: None,
        cancel: app.shutdown.child_token(),
        versions: Default::default(),
    };
    launch(app, loaded, options, remote, How::Adopt(run.id), begun);
    begun_id.id("went on").await.map(|_| ())
}

/// The served file `run` was made from: the run's record names the file as it was given.
pub(super) fn served_of(
    app: &App,
    run: &crate::run::state::RunRecord,
) -> Result<super::folder::ServedFile, ApiError> {
    app.files
        .files()
        .into_iter()
        .find(|f| f.file.display().to_string() == run.pipeline)
        .ok_or_else(|| {
            ApiError::Unprocessable(format!("its pipeline {} is not served", run.pipeline))
        })
}

/// Where the steps of a run of `file` run: on `treadle worker` processes (`--nats`), or here.
pub(super) fn remote_of(
    app: &App,
    file: &std::path::Path,
) -> Result<Option<Arc<dyn crate::run::exec::RemoteSteps>>, ApiError> {
    Ok(match &app.dispatcher {
        Some(d) => Some(d.for_run(source_of(file)?)),
        None => None,
    })
}

/// The pipeline's text, as its workers load it (`--nats`).
fn source_of(file: &std::path::Path) -> Result<String, ApiError> {
    std::fs::read_to_string(file)
        .map_err(|e| ApiError::Unprocessable(format!("cannot read {}: {e}", file.display())))
}

/// Loads a served pipeline as `treadle run` does, with the API's `vars` filled in its
/// parsed steps as data (`api_vars.rs`), never into its text.
async fn load_with_data(
    file: std::path::PathBuf,
    job: Option<String>,
    vars: crate::pipeline::vars::Vars,
) -> Result<crate::pipeline::Loaded, ApiError> {
    tokio::task::spawn_blocking(move || {
        let scope = crate::pipeline::CheckScope {
            job: job.as_deref(),
            env: &crate::pipeline::model::process_env,
            machine: false,
        };
        let text = crate::pipeline::load::read_source(&file)
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
        let names = vars.keys().cloned().collect();
        let mut loaded = crate::pipeline::load_text_leaving(&file, &text, &scope, &names)
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
        super::api_vars::fill(&mut loaded.pipeline, &text, &vars)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        Ok(loaded)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// The body's `vars` as `--var NAME=VALUE` pairs would give them: names checked, values
/// strings, numbers or booleans.
fn vars_of(
    given: &serde_json::Map<String, serde_json::Value>,
) -> Result<crate::pipeline::vars::Vars, ApiError> {
    let mut pairs = Vec::new();
    for (name, value) in given {
        let value = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "var `{name}`: a value is a string, a number or a boolean"
                )));
            }
        };
        pairs.push(format!("{name}={value}"));
    }
    crate::pipeline::vars::gather(&[], &pairs).map_err(|e| ApiError::BadRequest(e.to_string()))
}
