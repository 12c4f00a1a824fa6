//! Client configuration: endpoint, model, API key (kept secret) and retry policy.

use std::fmt;
use std::time::Duration;

use super::error::MissingApiKey;

/// An API key. Its `Debug` and `Display` print `***`, so it cannot leak through logs or
/// error messages by formatting; only [`ApiKey::expose`] reveals it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: String) -> Self {
        Self(key)
    }

    /// Reads a key from the environment variable `var`, trimming surrounding whitespace
    /// (a key read from a file often ends in a newline); unset, empty and non-Unicode
    /// values are all [`MissingApiKey`].
    pub fn from_env(var: &str) -> Result<Self, MissingApiKey> {
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(Self(key.trim().to_owned())),
            _ => Err(MissingApiKey {
                var: var.to_owned(),
            }),
        }
    }

    /// The key itself, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// When and how often a request is retried before its response arrives.
///
/// Retried: connection errors (refused, reset, timed out) and HTTP 408, 429 and 5xx.
/// Never retried: anything after the first byte of a successful response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` requests).
    pub max_retries: u32,
    /// The first backoff; each retry doubles it, with jitter.
    pub base_delay: Duration,
    /// Cap of any single wait, including one a `Retry-After` header asks for.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

/// The default [`ModelConfig::idle_timeout`]: generous for a slow local model on a long
/// prompt, short enough that a dead endpoint does not hold a run for long.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The default [`ModelConfig::max_response_bytes`]: far above any real answer's body.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 << 20;

/// The default [`ModelConfig::call_timeout`]: a long answer of a slow local model fits
/// (4,000 tokens at 10 a second is under 7 minutes); an endpoint that trickles a token now
/// and then, never silent long enough for the idle timeout, is cut off.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How the message of a reached limit tells its reader to raise it. The library's setters
/// by default ([`LimitNames::LIBRARY`]); a program that sets the limits from settings of
/// its own (a pipeline's `limits:` keys) names those, since its users never see the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitNames {
    /// Where [`ModelConfig::idle_timeout`] is set.
    pub idle: &'static str,
    /// Where [`ModelConfig::max_response_bytes`] is set.
    pub response: &'static str,
    /// Where [`ModelConfig::call_timeout`] is set.
    pub call: &'static str,
}

impl LimitNames {
    /// The library's own setters.
    pub const LIBRARY: Self = Self {
        idle: "SessionBuilder::idle_timeout or ModelConfig::idle_timeout",
        response: "SessionBuilder::max_response_bytes or ModelConfig::max_response_bytes",
        call: "SessionBuilder::call_timeout or ModelConfig::call_timeout",
    };
}

impl Default for LimitNames {
    fn default() -> Self {
        Self::LIBRARY
    }
}

/// How [`TurnRequest::ask`](crate::TurnRequest::ask) makes the model answer in a given shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StructuredOutput {
    /// `response_format: json_schema`, which OpenAI, vLLM and llama.cpp's server enforce.
    #[default]
    JsonSchema,
    /// A reporting tool whose argument schema is the answer's, with `tool_choice` naming
    /// it: for endpoints without `response_format`.
    ForcedTool,
}

/// Everything a [`ModelClient`](super::ModelClient) needs to reach a model.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:8080/v1`;
    /// `/chat/completions` is appended.
    pub endpoint: String,
    /// The model name sent in every request.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>`; without one no `Authorization` header is
    /// sent (local servers need none).
    pub api_key: Option<ApiKey>,
    /// Retries before the response.
    pub retry: RetryPolicy,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f32>,
    /// Nucleus sampling (`top_p`); the server's default when `None`.
    pub top_p: Option<f32>,
    /// The most tokens one response may have (`max_tokens`); the server's when `None`.
    pub max_tokens: Option<u32>,
    /// `reasoning_effort` (`low`, `medium`, `high`) for models that take one; not sent
    /// when `None`.
    pub reasoning_effort: Option<String>,
    /// How long to wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The longest the endpoint may stay silent: before the response head (retries
    /// included) and between two pieces of the streamed body. Past it the step fails with
    /// [`InferenceError::Idle`](super::InferenceError::Idle). Default 120 s.
    pub idle_timeout: Duration,
    /// The most bytes one streamed response body may carry. The body is counted as it
    /// arrives and never held whole; past it the step fails with
    /// [`InferenceError::TooLarge`](super::InferenceError::TooLarge). Default 8 MiB.
    pub max_response_bytes: u64,
    /// The longest one model call may take in all, from the request (retries included) to
    /// the end of its stream, however steadily the stream flows. Past it the step fails
    /// with [`InferenceError::TooSlow`](super::InferenceError::TooSlow). Default 10 min.
    pub call_timeout: Duration,
    /// How the messages of these limits name their settings.
    pub limit_names: LimitNames,
}

impl ModelConfig {
    /// A configuration with no key, the default retry policy, the server's temperature
    /// and a 10 s connect timeout.
    pub fn new(endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            model: model.into(),
            api_key: None,
            retry: RetryPolicy::default(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            reasoning_effort: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            limit_names: LimitNames::LIBRARY,
        }
    }

    /// Sets the API key.
    #[must_use]
    pub fn with_api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the sampling temperature.
    #[must_use]
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets the idle timeout (see [`ModelConfig::idle_timeout`]).
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets the total time limit of one call (see [`ModelConfig::call_timeout`]).
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the response size limit (see [`ModelConfig::max_response_bytes`]).
    #[must_use]
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Sets the connect timeout.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_never_formats() {
        let key = ApiKey::new("sk-secret".into());
        assert_eq!(format!("{key} {key:?}"), "*** ***");
        let config = ModelConfig::new("http://x", "m").with_api_key(key);
        assert!(!format!("{config:?}").contains("sk-secret"));
    }

    #[test]
    fn missing_env_key() {
        let err = ApiKey::from_env("TREADLE_TEST_SURELY_UNSET_KEY_VAR");
        assert!(err.is_err());
    }
}
