//! `GET /api/v1/runs/{id}/steps/{seq}/receipt`: what a step's cache key is made of: its
//! kind, the digest of its configuration, each input's tree digest and the key of the step
//! before it (see `crate::cache::key`), and whether this run took it from the cache.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::api::{blocking, run_id};
use super::error::ApiError;
use super::shared::App;
use crate::cache::records::Records;

/// The receipt of one step.
pub async fn receipt(
    State(app): State<Arc<App>>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let run = run_id(&id)?;
    let seq: u32 = seq
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{seq}` is not a step number")))?;
    let receipt = blocking(&app, move |store| {
        store.run(run)?;
        let step = store
            .steps(run)?
            .into_iter()
            .find(|s| s.seq == seq)
            .ok_or_else(|| ApiError::NotFound(format!("run {run} has no step {seq}")))?;
        let records =
            Records::open(store.database()).map_err(|e| ApiError::Internal(e.to_string()))?;
        let outcome = records
            .result(run, seq)
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "step {seq} ({}) of run {run} has no receipt: only task, agent, get and put steps that succeeded are keyed",
                    step.name
                ))
            })?;
        let mut parts = vec![json!({"name": "config", "digest": outcome.parts.config.hex()})];
        for (name, digest) in &outcome.parts.inputs {
            parts.push(json!({"name": format!("input:{name}"), "digest": digest.hex()}));
        }
        parts.push(json!({"name": "prev", "digest": outcome.parts.prev.hex()}));
        Ok(json!({
            "run": run,
            "seq": seq,
            "step": step.name,
            "key": outcome.key.hex(),
            "kind": outcome.parts.kind,
            "parts": parts,
            "hit": step.cached_from.is_some(),
            "from_run": step.cached_from,
        }))
    })
    .await?;
    Ok(Json(receipt))
}
