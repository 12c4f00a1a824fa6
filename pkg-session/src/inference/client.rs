//! [`ModelClient`]: one streamed chat completion per call, with deltas reported as they
//! arrive and errors mapped to [`InferenceError`].

use std::sync::Arc;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::{OpenAIError, StreamError};
use futures::StreamExt;
use serde_json::Value;
use tracing::Instrument;
use treadle_event::DeltaKind;

use super::chunk::{Chunk, is_json};
use super::config::{ApiKey, ModelConfig};
use super::error::{BODY_LIMIT, ClientError, InferenceError, redact, truncate};
use super::limits::{GUARD, SizeGuard};
use super::request::{Body, PreparedRequest};
use super::retry::{HttpFailure, RetryService};
use super::stitch::{Completion, Stitcher};

/// A client of one model at one OpenAI-compatible endpoint. Cheap to clone (one `Arc`);
/// every client of the process shares one HTTP connection pool (see `http.rs`). Crate-private: sessions are the way in; its
/// tests (`client_tests.rs`) run it against the scripted server.
#[derive(Clone)]
pub struct ModelClient {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client<OpenAIConfig>,
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
        check_endpoint(&endpoint, key)?;
        if let Some(key) = key
            && reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).is_err()
        {
            // async-openai would panic building the header; refuse the key here instead.
            return Err(ClientError::InvalidApiKey {
                endpoint: redact(endpoint, Some(key)),
            });
        }
        let http =
            super::http::shared_client(config.connect_timeout).map_err(|e| ClientError::Http {
                endpoint: redact(endpoint.clone(), key),
                detail: redact(e.to_string(), key),
            })?;
        // Explicit values for everything OpenAIConfig would otherwise read from OPENAI_*
        // variables: a key meant for OpenAI must not go to another endpoint.
        let openai = OpenAIConfig::new()
            .with_api_base(endpoint.clone())
            .with_api_key(key.unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        let service = RetryService::new(
            http.clone(),
            config.retry,
            key.is_none(),
            Arc::from(endpoint.as_str()),
        );
        // `build` with the shared client: `with_config` would build a client (and a TLS
        // configuration) of its own for every session.
        let client = Client::build(http, openai).with_http_service(service);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
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
        let body = request.body(&self.inner.model, &self.inner.sampling);
        let span = crate::trace::chat(&self.inner.model);
        let guard = SizeGuard::new(self.inner.max_response_bytes);
        let call = GUARD
            .scope(guard.clone(), self.stream_body(&body, on_delta))
            .instrument(span.clone());
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
        let result = match result {
            Err(_) if guard.tripped() => Err(InferenceError::TooLarge {
                endpoint: self.inner.endpoint.clone(),
                limit: guard.max_bytes,
                setting: self.inner.limit_names.response,
            }),
            other => other,
        };
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
        body: &Body<'_>,
        mut on_delta: F,
    ) -> Result<Completion, InferenceError>
    where
        F: FnMut(DeltaKind, Option<u32>, &str) + Send,
    {
        let idle = self.inner.idle_timeout;
        let silent = |waiting| InferenceError::Idle {
            endpoint: self.inner.endpoint.clone(),
            limit: idle,
            waiting,
            setting: self.inner.limit_names.idle,
        };
        let chat = self.inner.client.chat();
        let open = chat.create_stream_byot::<&Body<'_>, Chunk>(body);
        let mut stream = tokio::time::timeout(idle, open)
            .await
            .map_err(|_| silent("waiting for the response head"))?
            .map_err(|e| self.open_error(e))?;
        let mut stitcher = Stitcher::default();
        loop {
            let next = tokio::time::timeout(idle, stream.next())
                .await
                .map_err(|_| silent("waiting for the next piece of the stream"))?;
            let Some(item) = next else { break };
            let chunk = item.map_err(|e| self.stream_error(e))?;
            stitcher
                .push(chunk, &mut on_delta)
                .map_err(|error| InferenceError::Remote {
                    endpoint: self.inner.endpoint.clone(),
                    detail: self.clean(error.message),
                })?;
        }
        stitcher
            .finish(&self.inner.model)
            .ok_or_else(|| InferenceError::StreamCut {
                endpoint: self.inner.endpoint.clone(),
                detail: "no chunk carried a finish_reason".to_owned(),
            })
    }

    /// Maps a failure to get a response.
    fn open_error(&self, error: OpenAIError) -> InferenceError {
        let endpoint = self.inner.endpoint.clone();
        match error {
            OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpFailure>() {
                Ok(failure) => match *failure {
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
                },
                Err(other) => InferenceError::Transport {
                    endpoint,
                    detail: self.clean(other.to_string()),
                },
            },
            other => InferenceError::Transport {
                endpoint,
                detail: self.clean(other.to_string()),
            },
        }
    }

    /// Maps a failure after the response started.
    fn stream_error(&self, error: OpenAIError) -> InferenceError {
        let endpoint = self.inner.endpoint.clone();
        match error {
            OpenAIError::JSONDeserialize(parse, data) => {
                let what = if is_json(&data) {
                    "unexpected shape"
                } else {
                    "not JSON"
                };
                InferenceError::Malformed {
                    endpoint,
                    detail: self.clean(format!("{what} ({parse}): {data}")),
                }
            }
            // The body broke off (connection reset, truncated chunked encoding): the
            // answer is incomplete, whatever the transport said.
            OpenAIError::StreamError(stream) => match *stream {
                StreamError::EventStream(detail) => InferenceError::StreamCut {
                    endpoint,
                    detail: self.clean(detail),
                },
                other => InferenceError::Malformed {
                    endpoint,
                    detail: self.clean(other.to_string()),
                },
            },
            other => InferenceError::Transport {
                endpoint,
                detail: self.clean(other.to_string()),
            },
        }
    }

    /// Removes the key from text headed for an error, and bounds its length.
    fn clean(&self, text: String) -> String {
        let key = self.inner.api_key.as_ref().map(ApiKey::expose);
        truncate(redact(text, key), BODY_LIMIT)
    }
}

fn check_endpoint(endpoint: &str, key: Option<&str>) -> Result<(), ClientError> {
    let invalid = |detail: String| ClientError::InvalidEndpoint {
        endpoint: redact(endpoint.to_owned(), key),
        detail,
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| invalid(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(invalid(format!("scheme {other:?} is not http or https"))),
    }
}
