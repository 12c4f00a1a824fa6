//! The API's error answer: a status and `{"error": "..."}` saying what was wrong and, where
//! there is one, how to fix it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// No token, or the wrong one (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A cross-site request that would change state (403).
    #[error("{0}")]
    Forbidden(String),
    /// No such run, step, pipeline or approval (404).
    #[error("{0}")]
    NotFound(String),
    /// The state does not allow it: already ended, already answered (409).
    #[error("{0}")]
    Conflict(String),
    /// The pipeline cannot run as asked (422): it does not load, or the job is unknown.
    #[error("{0}")]
    Unprocessable(String),
    /// The server failed (500).
    #[error("{0}")]
    Internal(String),
    /// Too many requests of this kind are under way; ask again in a moment (503, with
    /// `Retry-After`).
    #[error("{0}")]
    Busy(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<crate::blocking::WorkerStopped> for ApiError {
    fn from(stopped: crate::blocking::WorkerStopped) -> Self {
        Self::Internal(stopped.to_string())
    }
}

impl From<crate::run::StateError> for ApiError {
    fn from(e: crate::run::StateError) -> Self {
        match e {
            crate::run::StateError::NoRun(n) => Self::NotFound(format!("there is no run {n}")),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() });
        let mut response = (self.status(), Json(body)).into_response();
        if let Self::Busy(_) = self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}
