//! Replay mode: compares a request with the recorded one and answers with the recorded
//! stream, or refuses with HTTP 409 naming the first difference.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::path::PathBuf;

use super::shared::{Shared, refuse};
use super::{TapeError, first_difference, recorded_calls, request_path, response_path};

/// Answers call number N of the step (each request takes the next number, matched or not).
pub(super) async fn answer(shared: &Shared, body: &Bytes) -> Response {
    let spec = &shared.spec;
    let n = spec.counter.fetch_add(1, Ordering::SeqCst) + 1;
    match recorded_answer(shared, n, body).await {
        Ok(stream) => (
            StatusCode::OK,
            [(CONTENT_TYPE, "text/event-stream")],
            stream,
        )
            .into_response(),
        Err(detail) => {
            let error = TapeError::Mismatch {
                step: spec.step.clone(),
                detail: detail.to_string(),
            };
            let message = error.to_string();
            shared.fail(error);
            // 409: not a status the client retries, so the step fails at once.
            refuse(StatusCode::CONFLICT, &message)
        }
    }
}

/// Why a request does not get its recorded answer.
#[derive(Debug, thiserror::Error)]
enum Mismatch {
    /// The recording has fewer calls.
    #[error("model call {n} was not recorded ({} holds {held} call(s))", .dir.display())]
    NotRecorded {
        /// The call's number.
        n: u32,
        /// The recording.
        dir: PathBuf,
        /// How many calls it holds.
        held: u32,
    },
    /// A file of the recording cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The recorded request is not JSON.
    #[error("{} is not JSON: {source}", .path.display())]
    RecordedNotJson {
        /// Which.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The request is not JSON.
    #[error("model call {n}: the request body is not JSON: {source}")]
    RequestNotJson {
        /// The call's number.
        n: u32,
        /// Why.
        source: serde_json::Error,
    },
    /// The request differs from the recorded one.
    #[error("model call {n} differs from {} {difference}", .path.display())]
    Differs {
        /// The call's number.
        n: u32,
        /// The recorded request.
        path: PathBuf,
        /// The first difference, with its JSON path.
        difference: super::diff::Difference,
    },
}

async fn recorded_answer(shared: &Shared, n: u32, body: &Bytes) -> Result<Vec<u8>, Mismatch> {
    let dir = &shared.spec.dir;
    let path = request_path(dir, n);
    let unread = |path: &PathBuf| {
        let path = path.clone();
        move |source| Mismatch::Read { path, source }
    };
    let recorded = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Mismatch::NotRecorded {
                n,
                dir: dir.clone(),
                held: recorded_calls(dir),
            });
        }
        Err(e) => return Err(unread(&path)(e)),
    };
    let expected: Value =
        serde_json::from_slice(&recorded).map_err(|source| Mismatch::RecordedNotJson {
            path: path.clone(),
            source,
        })?;
    let got: Value =
        serde_json::from_slice(body).map_err(|source| Mismatch::RequestNotJson { n, source })?;
    if let Some(difference) = first_difference(&expected, &got) {
        return Err(Mismatch::Differs {
            n,
            path,
            difference,
        });
    }
    let answer = response_path(dir, n);
    tokio::fs::read(&answer).await.map_err(unread(&answer))
}
