//! The loopback server of one agent step: binds `127.0.0.1:0`, sends chat completions to
//! the record or the replay handler, and reports a mismatch or a failed recording when the
//! step ends.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use tokio_util::sync::CancellationToken;

use super::shared::{Shared, StepSpec, refuse};
use super::{TapeError, TapeMode, record, replay};

/// How long recording waits to connect to the real endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
