//! Record mode: forwards a chat completion to the step's real endpoint and streams the
//! answer back while writing the request and the answer to `NNN.request.json` and
//! `NNN.response.sse`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::shared::{Shared, refuse};
use super::{TapeError, request_path, response_path, scrub};

/// Chunks in flight between the endpoint and the session.
const CHANNEL_DEPTH: usize = 64;

type Piece = Result<Bytes, std::io::Error>;

/// Forwards one request. Only a 2xx answer takes a call number and is written; other
/// answers pass through unrecorded, so the client's retry is what gets recorded.
pub(super) async fn forward(shared: &Arc<Shared>, headers: &HeaderMap, body: Bytes) -> Response {
    let spec = &shared.spec;
    let Some(http) = &shared.http else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "model tape: no HTTP client in record mode",
        );
    };
    let url = format!("{}/chat/completions", spec.upstream);
    let mut request = http.post(&url).body(body.clone());
    // The key travels on to the endpoint in its header; it is never written to the tape.
    for name in [AUTHORIZATION, CONTENT_TYPE, ACCEPT] {
        if let Some(value) = headers.get(&name) {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            // 502 lets the client retry by its policy, as it would a direct failure.
            return refuse(
                StatusCode::BAD_GATEWAY,
                &format!("model tape: cannot reach {url}: {e}"),
            );
        }
    };
    let status = upstream.status();
    if !status.is_success() {
        return pass_error(upstream).await;
    }

    let n = spec.counter.fetch_add(1, Ordering::SeqCst) + 1;
    let path = request_path(&spec.dir, n);
    let pretty = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| serde_json::to_vec_pretty(&v).ok())
        .unwrap_or_else(|| body.to_vec());
    let pretty = scrub::request(&spec.secrets, pretty);
    if let Err(e) = tokio::fs::write(&path, pretty).await {
        shared.fail(TapeError::Record {
            step: spec.step.clone(),
            detail: format!("cannot write {}: {e}", path.display()),
        });
    }
    let content_type = upstream
        .headers()
        .get(CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("text/event-stream"));
    let (tx, rx) = mpsc::channel::<Piece>(CHANNEL_DEPTH);
    shared.track(tokio::spawn(tee(shared.clone(), n, upstream, tx)));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    let mut response = Body::from_stream(stream).into_response();
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// Passes an error answer through with the headers the client's retry looks at.
async fn pass_error(upstream: reqwest::Response) -> Response {
    let status = upstream.status();
    let mut headers = HeaderMap::new();
    for name in [CONTENT_TYPE, RETRY_AFTER] {
        if let Some(value) = upstream.headers().get(&name) {
            headers.insert(name, value.clone());
        }
    }
    let body = upstream.bytes().await.unwrap_or_default();
    (status, headers, body).into_response()
}

/// Copies the answer to the session and to `NNN.response.sse`. The file is written before
/// the session's body ends, so a finished call is on disk when the next one starts.
async fn tee(shared: Arc<Shared>, n: u32, upstream: reqwest::Response, tx: mpsc::Sender<Piece>) {
    let mut recorded = Vec::new();
    let mut stream = upstream.bytes_stream();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => {
                recorded.extend_from_slice(&chunk);
                // The session went away (interrupted): keep what it received.
                if tx.send(Ok(chunk)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                // The session sees the cut and fails the step with it; the file keeps the
                // part that arrived.
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                break;
            }
        }
    }
    let path = response_path(&shared.spec.dir, n);
    let recorded = scrub::response(&shared.spec.secrets, &recorded);
    if let Err(e) = tokio::fs::write(&path, &recorded).await {
        shared.fail(TapeError::Record {
            step: shared.spec.step.clone(),
            detail: format!("cannot write {}: {e}", path.display()),
        });
    }
    drop(tx);
}
