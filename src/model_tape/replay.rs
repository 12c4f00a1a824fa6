//! Replay mode: compares a request with the recorded one and answers with the recorded
//! stream, or refuses with HTTP 409 naming the first difference.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::server::{Shared, refuse};
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
                detail,
            };
            let message = error.to_string();
            shared.fail(error);
            // 409: not a status the client retries, so the step fails at once.
            refuse(StatusCode::CONFLICT, &message)
        }
    }
}

async fn recorded_answer(shared: &Shared, n: u32, body: &Bytes) -> Result<Vec<u8>, String> {
    let dir = &shared.spec.dir;
    let path = request_path(dir, n);
    let recorded = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "model call {n} was not recorded ({} holds {} call(s))",
                dir.display(),
                recorded_calls(dir)
            ));
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let expected: Value = serde_json::from_slice(&recorded)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let got: Value = serde_json::from_slice(body)
        .map_err(|e| format!("model call {n}: the request body is not JSON: {e}"))?;
    if let Some(difference) = first_difference(&expected, &got) {
        return Err(format!(
            "model call {n} differs from {} {difference}",
            path.display()
        ));
    }
    let answer = response_path(dir, n);
    tokio::fs::read(&answer)
        .await
        .map_err(|e| format!("cannot read {}: {e}", answer.display()))
}
