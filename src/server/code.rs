//! Workflows written in Rust, served beside (or instead of) pipeline files (what the
//! server needs of one is `super::workflows`): starting a run of one from
//! `POST /api/v1/runs` with its typed input, and going on with one a stopped server left
//! running.
//!
//! A run of a workflow goes through the executor as a YAML run does, so it is listed, shown,
//! followed, cancelled and answered (approvals, questions) by the same routes; only its
//! start differs: `{"pipeline": NAME, "input": VALUE}`, where the input is checked against
//! the workflow's JSON Schema before anything starts. The input is kept in the state file
//! (`workflow_inputs`), so that a run left running by a stopped server can be resumed by
//! the next one: a new run, resuming it (its recorded steps with unchanged keys replayed),
//! since a workflow's plan is made by its code and cannot be taken up under the old id.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use redb::{Database, ReadableDatabase, TableDefinition};

use super::api::blocking;
use super::error::ApiError;
use super::shared::{App, LiveRun};
use super::workflows::{CodeWorkflow, Launch, OnBegin};
use crate::run::StateError;
use crate::run::event_log::EventLog;

const INPUTS: TableDefinition<u64, &str> = TableDefinition::new("workflow_inputs");

fn db_err(e: impl Into<redb::Error>) -> StateError {
    StateError::of_redb(e.into())
}

/// Keeps the input run `id` was started with.
fn keep_input(db: &Database, id: u64, input: &str) -> Result<(), StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    txn.open_table(INPUTS)
        .map_err(db_err)?
        .insert(id, input)
        .map_err(db_err)?;
    txn.commit().map_err(db_err)
}

/// The input run `id` was started with, if it was kept.
fn input_of(db: &Database, id: u64) -> Result<Option<String>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(INPUTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(db_err(e)),
    };
    Ok(table.get(id).map_err(db_err)?.map(|v| v.value().to_owned()))
}

/// Why `input` does not fit `schema`: one line per error, each with where it is.
fn misfits(schema: &serde_json::Value, input: &serde_json::Value) -> Result<(), ApiError> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| ApiError::Internal(format!("the workflow's input schema: {e}")))?;
    let errors: Vec<String> = validator
        .iter_errors(input)
        .map(|e| {
            let at = e.instance_path().to_string();
            match at.is_empty() {
                true => e.to_string(),
                false => format!("at {at}: {e}"),
            }
        })
        .collect();
    match errors.is_empty() {
        true => Ok(()),
        false => Err(ApiError::Unprocessable(format!(
            "the input does not fit the workflow's schema: {}",
            errors.join("; ")
        ))),
    }
}

/// `POST /api/v1/runs` for a workflow: 201 `{"id": N}` once the run has begun; a 4xx for an
/// input that is not the workflow's, with nothing started.
pub(super) async fn start(
    app: &Arc<App>,
    workflow: Arc<dyn CodeWorkflow>,
    input: Option<serde_json::Value>,
    trigger: String,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let input = input.unwrap_or(serde_json::Value::Null);
    misfits(workflow.input_schema(), &input)?;
    let id = begin(app, workflow, input, None).await?;
    blocking(app, move |store| {
        Ok(super::triggers::set(&store.database(), id, &trigger)?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))))
}

/// Starts `workflow` on `input` in this process (resuming run `resume`), live and
/// followed; answers its id once it has begun, with its input kept.
async fn begin(
    app: &Arc<App>,
    workflow: Arc<dyn CodeWorkflow>,
    input: serde_json::Value,
    resume: Option<u64>,
) -> Result<u64, ApiError> {
    let (begun, begun_id) = super::begun::channel();
    let cancel = app.shutdown.child_token();
    let kept = input.to_string();
    let on_begin: OnBegin = {
        let (app, begun, cancel) = (app.clone(), begun.clone(), cancel.clone());
        Box::new(move |id: u64, journal: Arc<EventLog>| {
            // Kept before anyone hears of the run: a restart resumes it with this input.
            if let Err(e) = keep_input(&app.store.database(), id, &kept) {
                crate::console::tell!("treadle serve: run {id}: cannot keep its input: {e}");
            }
            if let Ok(mut live) = app.live.lock() {
                live.insert(id, LiveRun { journal, cancel });
            }
            begun.answer(Ok(id));
        })
    };
    let launch = Launch {
        store: app.store.clone(),
        agents: app.agents.clone(),
        cancel,
        resume,
        on_begin,
    };
    let running = workflow
        .launch(input, launch)
        .map_err(|e| ApiError::Unprocessable(format!("the input is not the workflow's: {e}")))?;
    let task_app = app.clone();
    tokio::spawn(async move {
        match running.await {
            Ok(id) => {
                if let Ok(mut live) = task_app.live.lock() {
                    live.remove(&id);
                }
            }
            Err(e) => begun.answer(Err(ApiError::Unprocessable(e.to_string()))),
        }
    });
    begun_id.id("began").await
}

/// Goes on with `run`, a run of `workflow` a stopped process left running: a new run on
/// the input it was started with, resuming it. Gives the new run's id.
pub(super) async fn resume(
    app: &Arc<App>,
    workflow: Arc<dyn CodeWorkflow>,
    run: &crate::run::state::RunRecord,
) -> Result<u64, ApiError> {
    let id = run.id;
    let kept = blocking(app, move |store| Ok(input_of(&store.database(), id)?)).await?;
    let text = kept.ok_or_else(|| {
        ApiError::Unprocessable("the input it was started with was not kept".to_owned())
    })?;
    let input = serde_json::from_str(&text)
        .map_err(|e| ApiError::Unprocessable(format!("its kept input: {e}")))?;
    let new = begin(app, workflow, input, Some(id)).await?;
    blocking(app, move |store| {
        Ok(super::triggers::set(&store.database(), new, "api")?)
    })
    .await?;
    Ok(new)
}
