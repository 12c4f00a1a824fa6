//! The limits on one model response: its body is counted as it arrives and cut at the
//! size limit, so a huge reply is refused without being held whole.
//!
//! The HTTP layer (the retry service under async-openai) wraps each successful response's
//! body; the request that tripped the limit learns it through a task-local flag, because
//! async-openai reports the cut body only as a text error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;

/// The size limit of the request being made on this task, and whether it tripped.
#[derive(Clone)]
pub(super) struct SizeGuard {
    pub max_bytes: u64,
    pub tripped: Arc<AtomicBool>,
}

tokio::task_local! {
    pub(super) static GUARD: SizeGuard;
}

impl SizeGuard {
    pub(super) fn new(max_bytes: u64) -> Self {
        SizeGuard {
            max_bytes,
            tripped: Arc::default(),
        }
    }

    pub(super) fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Acquire)
    }
}

/// Why a body was cut.
#[derive(Debug, thiserror::Error)]
#[error("the response body passed the limit of {0} bytes")]
struct TooLarge(u64);

/// `response` with its body cut after the current task's size limit, if it has one.
pub(super) fn limit_body(response: reqwest::Response) -> reqwest::Response {
    let Ok(guard) = GUARD.try_with(SizeGuard::clone) else {
        return response;
    };
    let mut head = http::Response::builder()
        .status(response.status())
        .version(response.version());
    if let Some(headers) = head.headers_mut() {
        *headers = response.headers().clone();
    }
    let mut seen: u64 = 0;
    let counted = guard.clone();
    let body = response.bytes_stream().map(move |piece| {
        let piece = piece.map_err(std::io::Error::other)?;
        seen = seen.saturating_add(piece.len() as u64);
        if seen > counted.max_bytes {
            counted.tripped.store(true, Ordering::Release);
            return Err(std::io::Error::other(TooLarge(counted.max_bytes)));
        }
        Ok(piece)
    });
    match head.body(reqwest::Body::wrap_stream(body)) {
        Ok(limited) => reqwest::Response::from(limited),
        // Status, version and headers came from a valid response, so this cannot fail;
        // were it to, the request fails rather than going on without its limit.
        Err(error) => {
            guard.tripped.store(true, Ordering::Release);
            tracing::error!(%error, "cannot wrap a response body in its size limit");
            let empty = http::Response::new(reqwest::Body::from(Vec::<u8>::new()));
            reqwest::Response::from(empty)
        }
    }
}
