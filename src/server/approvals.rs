//! Approvals through the API: list them, answer one.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};

use super::app::App;
use super::error::ApiError;

/// `GET /api/v1/approvals`.
pub async fn list(State(_app): State<Arc<App>>) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    Ok(Json(Vec::new()))
}

/// `POST /api/v1/runs/{id}/approvals/{seq}`.
pub async fn answer(
    State(_app): State<Arc<App>>,
    Path((_id, _seq)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Err(ApiError::NotFound("not yet".to_owned()))
}
