//! `GET /api/v1/runs/{id}/steps/{seq}/receipt`: what a step's cache key is made of.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};

use super::app::App;
use super::error::ApiError;

/// The receipt of one step.
pub async fn receipt(
    State(_app): State<Arc<App>>,
    Path((_id, _seq)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Err(ApiError::NotFound(
        "receipts are not available yet".to_owned(),
    ))
}
