//! The loopback server of one agent step: binds `127.0.0.1:0`, sends chat completions to
//! the record or the replay handler, and reports a mismatch or a failed recording when the
//! step ends.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{TapeError, TapeMode, record, replay};

/// How long recording waits to connect to the real endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
    failure: Mutex<Option<TapeError>>,
    /// Tasks still writing a recorded answer.
    writers: Mutex<Vec<JoinHandle<()>>>,
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

/// The running server of one agent step.
pub struct StepTape {
    base_url: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl std::fmt::Debug for StepTape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepTape")
            .field("base_url", &self.base_url)
            .field("step", &self.shared.spec.step)
            .finish_non_exhaustive()
    }
}

impl StepTape {
    /// The OpenAI-compatible base URL to give the step's session (`http://127.0.0.1:P/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Stops the server once the step is over, waits until every recorded answer is on
    /// disk, and returns the first mismatch or recording failure.
    pub async fn finish(self) -> Result<(), TapeError> {
        self.stop.cancel();
        let writers = std::mem::take(
            &mut *self
                .shared
                .writers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for writer in writers {
            // A writer that panicked has nothing left to write.
            let _ = writer.await;
        }
        let failure = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        failure.map_or(Ok(()), Err)
    }
}

impl Drop for StepTape {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Binds the step's server and serves it in the background until [`StepTape::finish`] or
/// drop.
pub(super) async fn start(spec: StepSpec) -> Result<StepTape, TapeError> {
    let http = match spec.mode {
        TapeMode::Record => Some({
            treadle_session::tls::install_crypto_provider();
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|e| TapeError::Record {
                    step: spec.step.clone(),
                    detail: format!("cannot set up the HTTP client: {e}"),
                })?
        }),
        TapeMode::Replay => None,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(TapeError::Bind)?;
    let addr = listener.local_addr().map_err(TapeError::Bind)?;
    let shared = Arc::new(Shared {
        spec,
        http,
        failure: Mutex::new(None),
        writers: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .fallback(unknown)
        .with_state(shared.clone());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let serve = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await });
        if let Err(e) = serve.await {
            tracing::warn!("model tape server stopped: {e}");
        }
    });
    Ok(StepTape {
        base_url: format!("http://{addr}/v1"),
        shared,
        stop,
    })
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match shared.spec.mode {
        TapeMode::Record => record::forward(&shared, &headers, body).await,
        TapeMode::Replay => replay::answer(&shared, &body).await,
    }
}

async fn unknown() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "the model tape serves POST /v1/chat/completions only",
    )
}

/// An OpenAI-style error answer, so the client shows `message`.
pub(super) fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "model_tape"}});
    (status, axum::Json(body)).into_response()
}
