//! [`ModelClient`]: one streamed chat completion per call, with deltas reported as they
//! arrive and errors mapped to [`InferenceError`].
//!
//! The call is plain reqwest: the request (URL parsed once per client, headers built once,
//! body encoded once per call and shared by its attempts) goes through `retry.rs`, and the
//! body is read piece by piece in the caller's task, counted against the size limit, split
//! into events by `sse.rs` and parsed into chunks that borrow from the event's bytes. Why not
//! async-openai's `create_stream_byot`, which this replaced: the request and chunk types
//! were ours already, so it carried only the transport, and on its streaming path each call
//! cost a spawned task, an unbounded channel between it and the caller, an SSE parser that
//! allocated a `String` per line and per event, and a request rebuilt (URL, headers, body)
//! per attempt: issue 32 measured it among the largest parts of a step's CPU.

use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use tracing::Instrument;
use treadle_event::DeltaKind;

use super::chunk::{Chunk, is_json};
use super::config::{ApiKey, ModelConfig, RetryPolicy};
use super::error::{BODY_LIMIT, ClientError, InferenceError, redact, truncate};
use super::limits::BodyLimit;
use super::request::PreparedRequest;
use super::retry::{HttpFailure, root_cause, send};
use super::sse::{Event, SseDecoder};
use super::stitch::{Completion, Stitcher};

/// How many body pieces already at hand are read after `data: [DONE]`, so that the end of
/// the body is seen and the connection goes back to the pool; never waited for.
const DRAIN_AFTER_DONE: usize = 4;

/// A client of one model at one OpenAI-compatible endpoint. Cheap to clone (one `Arc`);
/// every client of the process shares one HTTP connection pool (see `http.rs`). Crate-private: sessions are the way in; its
/// tests (`client_tests.rs`) run it against the scripted server.
#[derive(Clone)]
pub struct ModelClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// `{endpoint}/chat/completions`, parsed once.
    url: reqwest::Url,
    /// Content type, accept and (with a key) the authorization header, marked sensitive.
    headers: HeaderMap,
    retry: RetryPolicy,
    endpoint: String,
    model: String,
    api_key: Option<ApiKey>,
    sampling: super::request::Sampling,
    idle_timeout: std::time::Duration,
    max_response_bytes: u64,
    call_timeout: std::time::Duration,
    limit_names: super::LimitNames,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("endpoint", &self.inner.endpoint)
            .field("model", &self.inner.model)
            .finish_non_exhaustive()
    }
}

impl ModelClient {
    /// Builds a client. Fails if the endpoint is not an http(s) URL, the key cannot be
    /// sent in a header, or the HTTP client cannot be set up. No request is made.
    pub fn new(config: ModelConfig) -> Result<Self, ClientError> {
        // A trailing slash would make `.../v1//chat/completions`.
        let endpoint = config.endpoint.trim().trim_end_matches('/').to_owned();
        let key = config.api_key.as_ref().map(ApiKey::expose);
        let url = chat_url(&endpoint, key)?;
        let mut headers = HeaderMap::with_capacity(3);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        // Only a key of our own: never one from the environment (an OPENAI_API_KEY meant
        // for OpenAI must not go to another endpoint).
        if let Some(key) = key {
            let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {key}")) else {
                return Err(ClientError::InvalidApiKey {
                    endpoint: redact(endpoint, Some(key)),
                });
            };
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http =
            super::http::shared_client(config.connect_timeout).map_err(|e| ClientError::Http {
                endpoint: redact(endpoint.clone(), key),
                detail: redact(e.to_string(), key),
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                url,
                headers,
                retry: config.retry,
                endpoint,
                model: config.model,
                api_key: config.api_key,
                sampling: super::request::Sampling {
                    temperature: config.temperature,
                    top_p: config.top_p,
                    max_tokens: config.max_tokens,
                    reasoning_effort: config.reasoning_effort,
                },
                idle_timeout: config.idle_timeout,
                max_response_bytes: config.max_response_bytes,
                call_timeout: config.call_timeout,
                limit_names: config.limit_names,
            }),
        })
    }

    /// The endpoint's base URL (without a trailing slash).
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// The configured model name.
    pub fn model(&self) -> &str {
        &self.inner.model
    }

    /// The exact JSON body [`ModelClient::complete`] sends for `request`, as a tree (for
    /// hooks, which see it as JSON; the request itself is sent without building one).
    pub fn body(&self, request: &PreparedRequest) -> Value {
        let body = request.body(&self.inner.model, &self.inner.sampling);
        serde_json::to_value(&body).unwrap_or(Value::Null)
    }

    /// Streams one completion of `request`.
    ///
    /// `on_delta(kind, index, piece)` is called synchronously for every non-empty piece of
    /// text, reasoning or tool-call arguments as it arrives (`index` is `Some` only for
    /// tool-call arguments and names the call), all before this returns.
    ///
    /// Connection errors and HTTP 408, 429 and 5xx are retried by the configured policy
    /// before the response starts; once it starts, any failure is returned. Dropping the
    /// future closes the connection.
    pub async fn complete<F>(
        &self,
        request: &PreparedRequest,
        on_delta: F,
    ) -> Result<Completion, InferenceError>
    where
        F: FnMut(DeltaKind, Option<u32>, &str) + Send,
    {
        let span = crate::trace::chat(&self.inner.model);
        let call = self.stream_body(request, on_delta).instrument(span.clone());
        // The whole call, retries and stream, under one deadline: a trickle that is never
        // silent for the idle timeout still ends. Dropping the call closes the connection.
        let result = tokio::time::timeout(self.inner.call_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(InferenceError::TooSlow {
                    endpoint: self.inner.endpoint.clone(),
                    limit: self.inner.call_timeout,
                    setting: self.inner.limit_names.call,
                })
            });
        match &result {
            Ok(completion) => {
                crate::trace::record_usage(&span, &completion.usage);
                span.record("gen_ai.response.model", completion.model.as_str());
                span.record(
                    "gen_ai.response.finish_reasons",
                    completion.finish_reason.as_str(),
                );
            }
            Err(error) => crate::trace::record_error(&span, error.kind()),
        }
        result
    }

    /// Opens the stream and stitches its chunks, each wait bounded by the idle timeout.
    async fn stream_body<F>(
        &self,
        request: &PreparedRequest,
        mut on_delta: F,
    ) -> Result<Completion, InferenceError>
    where
        F: FnMut(DeltaKind, Option<u32>, &str) + Send,
    {
        let inner = &*self.inner;
        let idle = inner.idle_timeout;
        let silent = |waiting| InferenceError::Idle {
            endpoint: inner.endpoint.clone(),
            limit: idle,
            waiting,
            setting: inner.limit_names.idle,
        };
        let body = request.body(&inner.model, &inner.sampling);
        // Encoded once; every attempt sends the same bytes (a `Bytes` clone is a count).
        let mut encoded = Vec::with_capacity(request.encoded_len_hint());
        serde_json::to_writer(&mut encoded, &body).map_err(|e| InferenceError::Transport {
            endpoint: inner.endpoint.clone(),
            detail: self.clean(format!("cannot encode the request: {e}")),
        })?;
        let body = Bytes::from(encoded);
        let build = || {
            let mut request = reqwest::Request::new(reqwest::Method::POST, inner.url.clone());
            *request.headers_mut() = inner.headers.clone();
            *request.body_mut() = Some(reqwest::Body::from(body.clone()));
            request
        };
        let open = send(&inner.http, &inner.retry, &inner.endpoint, build);
        let mut response = tokio::time::timeout(idle, open)
            .await
            .map_err(|_| silent("waiting for the response head"))?
            .map_err(|e| self.open_error(e))?;
        let mut limit = BodyLimit::new(inner.max_response_bytes);
        let mut decoder = SseDecoder::default();
        let mut stitcher = Stitcher::default();
        'read: loop {
            while let Some(event) = decoder.next_event() {
                let Event::Data(data) = event else {
                    drain(&mut response);
                    break 'read;
                };
                let chunk = serde_json::from_slice::<Chunk<'_>>(data)
                    .map_err(|e| self.malformed(&e, data))?;
                stitcher
                    .push(chunk, &mut on_delta)
                    .map_err(|error| InferenceError::Remote {
                        endpoint: inner.endpoint.clone(),
                        detail: self.clean(error.message),
                    })?;
            }
            let piece = tokio::time::timeout(idle, response.chunk())
                .await
                .map_err(|_| silent("waiting for the next piece of the stream"))?;
            match piece {
                Ok(Some(piece)) => {
                    limit
                        .take(piece.len())
                        .map_err(|_| InferenceError::TooLarge {
                            endpoint: inner.endpoint.clone(),
                            limit: inner.max_response_bytes,
                            setting: inner.limit_names.response,
                        })?;
                    decoder.feed(&piece);
                }
                Ok(None) => break,
                // The body broke off (connection reset, truncated chunked encoding): the
                // answer is incomplete, whatever the transport said.
                Err(error) => {
                    return Err(InferenceError::StreamCut {
                        endpoint: inner.endpoint.clone(),
                        detail: self.clean(root_cause(&error)),
                    });
                }
            }
        }
        stitcher
            .finish(&inner.model)
            .ok_or_else(|| InferenceError::StreamCut {
                endpoint: inner.endpoint.clone(),
                detail: "no chunk carried a finish_reason".to_owned(),
            })
    }

    /// Maps a failure to get a response.
    fn open_error(&self, failure: HttpFailure) -> InferenceError {
        let endpoint = self.inner.endpoint.clone();
        match failure {
            HttpFailure::Status { status, body } => InferenceError::Status {
                endpoint,
                status,
                body: self.clean(body),
            },
            HttpFailure::Connect { detail } => InferenceError::Connect {
                endpoint,
                detail: self.clean(detail),
            },
            HttpFailure::Transport { detail } => InferenceError::Transport {
                endpoint,
                detail: self.clean(detail),
            },
        }
    }

    /// An event whose data is not a chunk: not JSON at all, or JSON of the wrong shape.
    fn malformed(&self, error: &serde_json::Error, data: &[u8]) -> InferenceError {
        let data = String::from_utf8_lossy(data);
        let what = if is_json(&data) {
            "unexpected shape"
        } else {
            "not JSON"
        };
        InferenceError::Malformed {
            endpoint: self.inner.endpoint.clone(),
            detail: self.clean(format!("{what} ({error}): {data}")),
        }
    }

    /// Removes the key from text headed for an error, and bounds its length.
    fn clean(&self, text: String) -> String {
        let key = self.inner.api_key.as_ref().map(ApiKey::expose);
        truncate(redact(text, key), BODY_LIMIT)
    }
}

/// `{endpoint}/chat/completions`, once `endpoint` is known to be an http(s) URL.
fn chat_url(endpoint: &str, key: Option<&str>) -> Result<reqwest::Url, ClientError> {
    let invalid = |detail: String| ClientError::InvalidEndpoint {
        endpoint: redact(endpoint.to_owned(), key),
        detail,
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| invalid(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(invalid(format!("scheme {other:?} is not http or https"))),
    }
    reqwest::Url::parse(&format!("{endpoint}/chat/completions"))
        .map_err(|e| invalid(redact(e.to_string(), key)))
}

/// Reads what is already at hand of the body after `data: [DONE]`, without waiting: once
/// its end is seen, the connection is reused. A server that keeps sending is left to the
/// drop, which closes the connection.
fn drain(response: &mut reqwest::Response) {
    for _ in 0..DRAIN_AFTER_DONE {
        match response.chunk().now_or_never() {
            Some(Ok(Some(_))) => continue,
            _ => return,
        }
    }
}
