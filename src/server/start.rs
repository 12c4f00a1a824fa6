//! Starting a run in the server (`POST /api/v1/runs`): it runs in this process, on the same
//! executor as `treadle run`, journaled and followed live; the answer waits only until the
//! run has its id.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use tokio::sync::oneshot;

use super::api::{blocking, load, not_served};
use super::app::{App, LiveRun};
use super::error::ApiError;
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
}

/// What a started run's id (or the reason it could not start) is sent through.
type Begun = Arc<Mutex<Option<oneshot::Sender<Result<u64, ApiError>>>>>;

fn tell(begun: &Begun, result: Result<u64, ApiError>) {
    if let Some(tx) = begun.lock().ok().and_then(|mut t| t.take()) {
        let _ = tx.send(result);
    }
}

/// `POST /api/v1/runs`: 201 `{"id": N}` once the run has begun.
pub async fn start(
    State(app): State<Arc<App>>,
    Json(req): Json<StartRequest>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let trigger = req.trigger.clone().unwrap_or_else(|| "api".to_owned());
    if !["cli", "web", "api"].contains(&trigger.as_str()) {
        return Err(ApiError::BadRequest(format!(
            "trigger `{trigger}`: expected `cli`, `web` or `api`"
        )));
    }
    let vars = vars_of(&req.vars)?;
    let served = app
        .file(&req.pipeline)
        .ok_or_else(|| not_served(&app, &req.pipeline))?;
    let remote: Option<Arc<dyn crate::run::exec::RemoteSteps>> = match &app.dispatcher {
        Some(d) => Some(d.for_run(source_of(&served.file, &vars)?)),
        None => None,
    };
    let loaded = load(served.file.clone(), req.job.clone(), vars).await?;
    loaded
        .job(req.job.as_deref())
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    let begun: Begun = Arc::new(Mutex::new(Some(tx)));
    let cancel = app.shutdown.child_token();
    let on_begin = {
        let (app, begun, cancel) = (app.clone(), begun.clone(), cancel.clone());
        Box::new(
            move |id: u64, journal: Arc<crate::run::journal::RunJournal>| {
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
                tell(&begun, Ok(id));
            },
        )
    };
    let options = RunOptions {
        job: req.job,
        style: Style::Quiet,
        state: None,
        cancel,
        versions: Default::default(),
    };
    let task_app = app.clone();
    tokio::spawn(async move {
        let (store, agents) = (task_app.store.clone(), task_app.agents.clone());
        let fresh = crate::cache::Start::Fresh;
        let served = Some(Served { on_begin, remote });
        let report = crate::run::run_served(&loaded, options, store, agents, &fresh, served).await;
        match report {
            Ok(r) => {
                if let Ok(mut live) = task_app.live.lock() {
                    live.remove(&r.run);
                }
            }
            Err(e) => tell(&begun, Err(ApiError::Unprocessable(e.to_string()))),
        }
    });
    let id = rx
        .await
        .map_err(|_| ApiError::Internal("the run ended before it began".to_owned()))??;
    blocking(&app, move |store| {
        Ok(triggers::set(&store.database(), id, &trigger)?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))))
}

/// The pipeline's text with `vars` filled in, as its workers load it (`--nats`).
fn source_of(
    file: &std::path::Path,
    vars: &crate::pipeline::vars::Vars,
) -> Result<String, ApiError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ApiError::Unprocessable(format!("cannot read {}: {e}", file.display())))?;
    Ok(crate::pipeline::vars::substitute(&text, vars))
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
