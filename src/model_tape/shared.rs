//! What one step's tape server and its handlers (`record`, `replay`) share: the step's
//! spec, the first failure, the writers still at work, and the error answer.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::task::JoinHandle;

use super::{TapeError, TapeMode};

/// What one step's server needs.
pub(super) struct StepSpec {
    pub mode: TapeMode,
    pub step: String,
    /// `DIR/<job>/<step>`.
    pub dir: PathBuf,
    /// The real base URL (record only).
    pub upstream: String,
    /// The step's model calls so far, shared by its attempts.
    pub counter: Arc<AtomicU32>,
    /// Masked in what is recorded.
    pub secrets: Arc<treadle_session::Secrets>,
}

/// State shared by the handlers of one step's server.
pub(super) struct Shared {
    pub spec: StepSpec,
    /// The client that forwards to the real endpoint (record only).
    pub http: Option<reqwest::Client>,
    /// The first mismatch or recording failure.
    pub(super) failure: Mutex<Option<TapeError>>,
    /// Tasks still writing a recorded answer.
    pub(super) writers: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    /// Keeps the first failure: later ones usually follow from it.
    pub fn fail(&self, error: TapeError) {
        let mut slot = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// Remembers a writer, so [`StepTape::finish`] waits for its file.
    pub fn track(&self, writer: JoinHandle<()>) {
        self.writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(writer);
    }
}

/// An OpenAI-style error answer, so the client shows `message`.
pub(super) fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "model_tape"}});
    (status, axum::Json(body)).into_response()
}
