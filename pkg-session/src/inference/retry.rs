//! Sends a model request, retries it before the response (connection errors, HTTP
//! 408/429/5xx, `Retry-After` honoured) and turns a final failure into an error that keeps
//! the HTTP status and body. The one retry policy of the client: nothing under it retries.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

use super::config::RetryPolicy;
use super::error::{BODY_LIMIT, is_retryable_status};

/// How much of an error body is read at most; the rest is not worth the wait.
const BODY_READ_LIMIT: usize = 16 * 1024;
/// How long reading an error body may take; a server that sends an error head and then
/// stalls must not hang the call.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The final failure of the HTTP exchange, before any answer; the client maps it to its
/// `InferenceError` (with the key redacted).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpFailure {
    /// A non-success status, after any retries.
    #[error("HTTP {status}")]
    Status { status: u16, body: String },
    /// No response: the root cause of a connection failure.
    #[error("{detail}")]
    Connect { detail: String },
    /// Any other failure before the response.
    #[error("{detail}")]
    Transport { detail: String },
}

/// Sends the request `build` makes (once per attempt: a request is consumed by sending
/// it) until a success status arrives, the failure is not retryable, or `policy` allows
/// no more retries. `endpoint` names the endpoint in the retry warnings.
pub(super) async fn send(
    http: &reqwest::Client,
    policy: &RetryPolicy,
    endpoint: &str,
    build: impl Fn() -> reqwest::Request,
) -> Result<reqwest::Response, HttpFailure> {
    let mut attempt: u32 = 0;
    loop {
        let retries_left = attempt < policy.max_retries;
        match http.execute(build()).await {
            Ok(response) if response.status().is_success() => return Ok(response),
            Ok(response) => {
                let status = response.status().as_u16();
                if retries_left && is_retryable_status(status) {
                    let delay = retry_after(response.headers(), policy.max_delay)
                        .unwrap_or_else(|| backoff(policy, attempt));
                    tracing::warn!(
                        endpoint,
                        status,
                        attempt = attempt + 1,
                        delay_ms = delay.as_millis() as u64,
                        "model endpoint answered a retryable status; retrying"
                    );
                    // Dropping the unread body closes that connection; cheaper than
                    // draining an error page we will not show.
                    drop(response);
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
                let body = read_body(response).await;
                return Err(HttpFailure::Status { status, body });
            }
            Err(error) => {
                let failure = classify(&error);
                let retryable = matches!(failure, HttpFailure::Connect { .. });
                if retries_left && retryable {
                    let delay = backoff(policy, attempt);
                    tracing::warn!(
                        endpoint,
                        error = %failure,
                        attempt = attempt + 1,
                        delay_ms = delay.as_millis() as u64,
                        "model endpoint unreachable; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
                return Err(failure);
            }
        }
    }
}

/// Sorts a reqwest error that came before any response into connection trouble (worth a
/// retry) or anything else, and finds its root cause for the message.
fn classify(error: &reqwest::Error) -> HttpFailure {
    let detail = root_cause(error);
    // `is_request` covers a connection that closed before the response head, e.g. a
    // pooled keep-alive connection the server had just dropped; the request did not
    // produce an answer, so it is as safe to retry as a refused connection.
    if error.is_connect() || error.is_timeout() || error.is_request() {
        HttpFailure::Connect { detail }
    } else {
        HttpFailure::Transport { detail }
    }
}

/// The innermost error's message, which names the real cause ("connection refused")
/// rather than the wrappers ("error sending request for url (...)").
pub(super) fn root_cause(error: &reqwest::Error) -> String {
    let mut current: &(dyn std::error::Error + 'static) = error;
    while let Some(source) = current.source() {
        current = source;
    }
    if let Some(io) = current.downcast_ref::<std::io::Error>() {
        match io.kind() {
            std::io::ErrorKind::ConnectionRefused => return "connection refused".to_owned(),
            std::io::ErrorKind::TimedOut => return "connection timed out".to_owned(),
            _ => {}
        }
    }
    if error.is_timeout() {
        return "timed out".to_owned();
    }
    current.to_string()
}

/// `Retry-After` in seconds (integer or decimal), capped at `max`. The HTTP-date form is
/// ignored (backoff applies): no provider we know sends it on 429/503.
fn retry_after(headers: &HeaderMap, max: Duration) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = value.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(max).min(max))
}

/// Exponential backoff from `base_delay`, capped at `max_delay`, with "equal jitter": a
/// random wait in `[d/2, d]`, so clients that failed together do not retry together.
fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
    let full = policy
        .base_delay
        .saturating_mul(factor)
        .min(policy.max_delay);
    let half = full / 2;
    half + half.mul_f64(unit_random())
}

/// A random number in `[0, 1)`, from the standard library's randomly keyed hasher: good
/// enough for jitter, and it spares a dependency.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Reads at most [`BODY_READ_LIMIT`] bytes of an error body within [`BODY_READ_TIMEOUT`],
/// cut to about [`BODY_LIMIT`] characters for the error message.
async fn read_body(mut response: reqwest::Response) -> String {
    let read = async {
        let mut buf = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            buf.extend_from_slice(&chunk);
            if buf.len() >= BODY_READ_LIMIT {
                break;
            }
        }
        buf
    };
    let buf = tokio::time::timeout(BODY_READ_TIMEOUT, read)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&buf);
    super::error::truncate(text.trim().to_owned(), BODY_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_parses_and_caps() {
        let mut h = HeaderMap::new();
        let max = Duration::from_secs(10);
        assert_eq!(retry_after(&h, max), None);
        h.insert(RETRY_AFTER, reqwest::header::HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h, max), Some(Duration::from_secs(2)));
        h.insert(
            RETRY_AFTER,
            reqwest::header::HeaderValue::from_static("0.5"),
        );
        assert_eq!(retry_after(&h, max), Some(Duration::from_millis(500)));
        h.insert(
            RETRY_AFTER,
            reqwest::header::HeaderValue::from_static("3600"),
        );
        assert_eq!(retry_after(&h, max), Some(max));
        h.insert(
            RETRY_AFTER,
            reqwest::header::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h, max), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        for attempt in 0..40 {
            let full = Duration::from_millis(100)
                .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
                .min(Duration::from_millis(1000));
            let d = backoff(&policy, attempt);
            assert!(d >= full / 2 && d <= full, "{attempt}: {d:?}");
        }
    }
}
