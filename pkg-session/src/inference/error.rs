//! Typed errors of the inference client: building it, and running one completion.

use std::fmt;

use treadle_event::ModelFailure;

/// How many characters of an error body an [`InferenceError::Status`] keeps.
pub(crate) const BODY_LIMIT: usize = 500;

/// Why a [`ModelClient`](super::ModelClient) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("invalid endpoint {endpoint:?}: {detail}")]
    InvalidEndpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The API key cannot be sent in an HTTP header (it holds control characters).
    #[error("the API key for {endpoint} contains characters not allowed in an HTTP header")]
    InvalidApiKey {
        /// The endpoint the key was meant for.
        endpoint: String,
    },
    /// The HTTP client could not be set up (for example, no TLS backend).
    #[error("cannot set up the HTTP client for {endpoint}: {detail}")]
    Http {
        /// The endpoint as configured.
        endpoint: String,
        /// The underlying cause.
        detail: String,
    },
}

/// An API key variable that is not set (or is empty, or not Unicode).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {var} holds no API key (unset, empty or not Unicode)")]
pub struct MissingApiKey {
    /// The variable that was read.
    pub var: String,
}

/// Why one completion failed. Every message names the endpoint and the cause; none
/// contains the API key (it is replaced by `***` if a server echoes it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InferenceError {
    /// No HTTP response: connection refused, DNS failure, connect timeout, connection
    /// reset before the response head. Retried before it is reported.
    #[error("cannot reach {endpoint}: {detail}")]
    Connect {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The root cause, e.g. `connection refused`.
        detail: String,
    },
    /// The server answered with a non-success HTTP status (after retries, if the status
    /// is retryable).
    #[error("{endpoint} answered HTTP {status}{}{}", reason(.status), body_suffix(.body))]
    Status {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The response body, cut to about 500 characters.
        body: String,
    },
    /// A stream chunk was not valid JSON, or JSON of a shape no chat-completions server
    /// sends (for example `choices` as a string).
    #[error("{endpoint} sent a chunk that is not valid JSON: {detail}")]
    Malformed {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The parse error and the start of the offending data.
        detail: String,
    },
    /// The stream ended (cleanly or by a broken connection) before any chunk carried a
    /// `finish_reason`.
    #[error("the stream from {endpoint} ended before the answer finished: {detail}")]
    StreamCut {
        /// The base URL of the endpoint.
        endpoint: String,
        /// What ended it.
        detail: String,
    },
    /// The server put an `error` object in the stream (as OpenRouter and vLLM do when a
    /// generation fails after the response started).
    #[error("{endpoint} reported an error in the stream: {detail}")]
    Remote {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The error object as the server sent it.
        detail: String,
    },
    /// The endpoint sent nothing for the idle timeout, before the response head or
    /// between two pieces of the body.
    #[error(
        "{endpoint} sent nothing for {}s while {waiting} (the model idle timeout; raise it \
         with {setting})",
        .limit.as_secs_f64()
    )]
    Idle {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The idle timeout.
        limit: std::time::Duration,
        /// What was awaited: the response head or the next piece of the stream.
        waiting: &'static str,
        /// Where the limit is set ([`LimitNames::idle`](super::LimitNames::idle)).
        setting: &'static str,
    },
    /// The response body passed the size limit; the rest was not read.
    #[error(
        "the response from {endpoint} passed {limit} bytes (the model response size limit; \
         raise it with {setting})"
    )]
    TooLarge {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The limit, in bytes.
        limit: u64,
        /// Where the limit is set ([`LimitNames::response`](super::LimitNames::response)).
        setting: &'static str,
    },
    /// One call took longer than the call time limit in all (a stream that trickles, never
    /// silent long enough for the idle timeout); the rest was not read.
    #[error(
        "{endpoint} took more than {}s to answer one model call (the model call time limit; \
         raise it with {setting})",
        .limit.as_secs_f64()
    )]
    TooSlow {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The limit.
        limit: std::time::Duration,
        /// Where the limit is set ([`LimitNames::call`](super::LimitNames::call)).
        setting: &'static str,
    },
    /// Any other failure of the HTTP exchange (TLS, protocol, request building).
    #[error("transport error talking to {endpoint}: {detail}")]
    Transport {
        /// The base URL of the endpoint.
        endpoint: String,
        /// The underlying cause.
        detail: String,
    },
}

impl InferenceError {
    /// The HTTP status, for [`InferenceError::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The kind of failure as one fixed word (`connect`, `http_status`, `idle_timeout`,
    /// ...): safe to put in a trace or a metric label, unlike the message, which may quote
    /// what the server sent.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "connect",
            Self::Status { .. } => "http_status",
            Self::Malformed { .. } => "malformed",
            Self::StreamCut { .. } => "stream_cut",
            Self::Remote { .. } => "remote",
            Self::Idle { .. } => "idle_timeout",
            Self::TooLarge { .. } => "too_large",
            Self::TooSlow { .. } => "too_slow",
            Self::Transport { .. } => "transport",
        }
    }

    /// The endpoint the error is about.
    pub fn endpoint(&self) -> &str {
        match self {
            Self::Connect { endpoint, .. }
            | Self::Status { endpoint, .. }
            | Self::Malformed { endpoint, .. }
            | Self::StreamCut { endpoint, .. }
            | Self::Remote { endpoint, .. }
            | Self::Idle { endpoint, .. }
            | Self::TooLarge { endpoint, .. }
            | Self::TooSlow { endpoint, .. }
            | Self::Transport { endpoint, .. } => endpoint,
        }
    }

    /// Whether this kind of failure happens before the first byte of an answer and is
    /// worth retrying: connection errors and HTTP 408, 429 and 5xx. The client has already
    /// retried these up to its policy's `max_retries` before reporting them; this tells a
    /// caller whether trying again later may help.
    pub fn is_retryable_before_first_byte(&self) -> bool {
        match self {
            Self::Connect { .. } => true,
            Self::Status { status, .. } => is_retryable_status(*status),
            _ => false,
        }
    }
}

impl InferenceError {
    /// How the endpoint failed, as a failed turn records it (`TurnFailed`'s `model`), so
    /// that a caller decides on the kind, not on the message.
    pub fn failure(&self) -> ModelFailure {
        match self {
            Self::Connect { .. } => ModelFailure::Unreachable,
            Self::Status { status: 408, .. } | Self::Idle { .. } | Self::TooSlow { .. } => {
                ModelFailure::Timeout
            }
            Self::Status { status: 429, .. } => ModelFailure::RateLimited,
            Self::Status { status, .. } if (500..600).contains(status) => ModelFailure::ServerError,
            Self::Status { .. } => ModelFailure::Refused,
            Self::Malformed { .. } => ModelFailure::Malformed,
            Self::StreamCut { .. } => ModelFailure::StreamCut,
            Self::Remote { .. } => ModelFailure::Remote,
            Self::TooLarge { .. } => ModelFailure::TooLarge,
            Self::Transport { .. } => ModelFailure::Transport,
        }
    }

    /// Whether the endpoint itself failed (an outage) rather than answered: unreachable,
    /// HTTP 408, 429 or 5xx after the retries, the stream cut off or silent, a transport
    /// error ([`ModelFailure::is_outage`]).
    pub fn is_outage(&self) -> bool {
        self.failure().is_outage()
    }
}

/// HTTP statuses worth another attempt: request timeout, rate limit, server errors.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..600).contains(&status)
}

fn reason(status: &u16) -> String {
    reqwest::StatusCode::from_u16(*status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" {r}"))
        .unwrap_or_default()
}

fn body_suffix(body: &str) -> BodySuffix<'_> {
    BodySuffix(body)
}

/// Displays `: body` or nothing, so an empty body does not leave a dangling colon.
struct BodySuffix<'a>(&'a str);

impl fmt::Display for BodySuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", self.0)
        }
    }
}

/// Cuts `text` to at most `limit` characters (on a char boundary), marking the cut.
pub(crate) fn truncate(mut text: String, limit: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(limit) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Replaces every occurrence of `secret` in `text` by `***`. Servers sometimes echo the
/// key they rejected ("Incorrect API key provided: sk-...") and errors end up in logs.
pub(crate) fn redact(text: String, secret: Option<&str>) -> String {
    match secret {
        // Keys shorter than 4 characters would redact ordinary words; they are not real
        // keys and not worth hiding at that cost.
        Some(s) if s.len() >= 4 && text.contains(s) => text.replace(s, "***"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_display_names_reason_and_body() {
        let e = InferenceError::Status {
            endpoint: "http://x/v1".into(),
            status: 401,
            body: "nope".into(),
        };
        assert_eq!(
            e.to_string(),
            "http://x/v1 answered HTTP 401 Unauthorized: nope"
        );
        let e = InferenceError::Status {
            endpoint: "http://x/v1".into(),
            status: 599,
            body: String::new(),
        };
        assert_eq!(e.to_string(), "http://x/v1 answered HTTP 599");
    }

    #[test]
    fn outages_are_the_retryable_failures_of_the_endpoint() {
        let at = || "http://x/v1".to_owned();
        let status = |status| InferenceError::Status {
            endpoint: at(),
            status,
            body: "b".into(),
        };
        let all = [
            InferenceError::Connect {
                endpoint: at(),
                detail: "connection refused".into(),
            },
            status(503),
            status(429),
            status(400),
            status(401),
            InferenceError::Malformed {
                endpoint: at(),
                detail: "x".into(),
            },
            InferenceError::StreamCut {
                endpoint: at(),
                detail: "eof".into(),
            },
            InferenceError::Remote {
                endpoint: at(),
                detail: "refused".into(),
            },
            InferenceError::Idle {
                endpoint: at(),
                limit: std::time::Duration::from_secs(3),
                waiting: "waiting for the response head",
                setting: "x",
            },
            InferenceError::TooLarge {
                endpoint: at(),
                limit: 10,
                setting: "x",
            },
            InferenceError::TooSlow {
                endpoint: at(),
                limit: std::time::Duration::from_secs(3),
                setting: "x",
            },
            InferenceError::Transport {
                endpoint: at(),
                detail: "tls".into(),
            },
        ];
        let outages: Vec<String> = all
            .iter()
            .filter(|e| e.is_outage())
            .map(|e| e.kind().to_owned() + &e.status().map(|s| s.to_string()).unwrap_or_default())
            .collect();
        assert_eq!(
            outages,
            [
                "connect",
                "http_status503",
                "http_status429",
                "stream_cut",
                "idle_timeout",
                "too_slow",
                "transport"
            ]
        );
        assert_eq!(status(408).failure(), ModelFailure::Timeout);
        assert_eq!(status(401).failure(), ModelFailure::Refused);
        assert!(status(502).is_outage() && !status(400).is_outage());
    }

    #[test]
    fn truncate_and_redact() {
        assert_eq!(truncate("héllo".into(), 2), "hé…");
        assert_eq!(truncate("hi".into(), 2), "hi");
        assert_eq!(
            redact("key sk-123 bad".into(), Some("sk-123")),
            "key *** bad"
        );
        assert_eq!(redact("a".into(), Some("a")), "a");
    }
}
