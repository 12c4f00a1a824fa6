//! Streaming chat completions from any OpenAI-compatible endpoint.
//!
//! The session's model client (crate-private: a [`Session`](crate::Session) is the way in)
//! sends an `InferenceRequest` as a streaming chat-completions body, reports each text,
//! reasoning and tool-argument piece as it arrives, and returns the assembled
//! `Completion`. This module's public types configure it and describe what it returns.
//!
//! # Layout
//!
//! * `config.rs`: [`ModelConfig`], [`ApiKey`] (never formatted), [`RetryPolicy`].
//! * `request.rs`: `InferenceRequest`, `ToolSpec`, `ToolChoice`, and the JSON body,
//!   encoded once per message and spliced per call (`PreparedRequest`).
//! * `client.rs`: `ModelClient`: the request on reqwest, the body read in the caller's
//!   task and decoded into chunks, error mapping; why reqwest directly and not
//!   async-openai.
//! * `sse.rs`: the server-sent events decoder (lines split across pieces, multi-line
//!   data, comments, keepalives, `[DONE]`), handing out data borrowed from its buffer.
//! * `chunk.rs`: tolerant chunk types (`finish_reason: ""`, missing or `null` usage and
//!   choices, unknown fields, `reasoning_content`, cached tokens), borrowing their strings
//!   from the event's data.
//! * `few.rs`: `Few`, a chunk's arrays (`choices`, `tool_calls`) without a `Vec` when they
//!   hold one element.
//! * `stitch.rs`: chunks → `Completion`; tool-call pieces stitched by index.
//! * `client_tests.rs`: the client against the scripted server (real loopback HTTP).
//! * `http.rs`: the process's shared HTTP clients (one connection pool, one TLS setup).
//! * `limits.rs`: the response size limit, counted on the body as it arrives.
//! * `retry.rs`: sending with the one retry policy, and errors that keep the HTTP status
//!   and body.
//! * `error.rs`: [`InferenceError`], [`ClientError`], [`MissingApiKey`].
//!
//! # Guarantees
//!
//! * Retries happen only before the response: connection errors and HTTP 408, 429 and
//!   5xx, honouring `Retry-After`. Once the body starts, any failure is an error.
//! * A stream that ends before a chunk carries a `finish_reason` is
//!   [`InferenceError::StreamCut`], never a short success.
//! * The API key appears in no error and no log line.
//! * No response hangs or floods a step: silence longer than
//!   [`ModelConfig::idle_timeout`] (before the head or between two body pieces) is
//!   [`InferenceError::Idle`], a body past [`ModelConfig::max_response_bytes`] is
//!   [`InferenceError::TooLarge`], cut as it arrives, and a call that takes longer than
//!   [`ModelConfig::call_timeout`] in all, however steadily it trickles, is
//!   [`InferenceError::TooSlow`].

mod chunk;
mod client;
mod config;
mod error;
mod few;
mod http;
mod limits;
mod request;
mod retry;
mod sse;
mod stitch;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod fuzz_tests;

pub(crate) use client::ModelClient;
pub use config::{
    ApiKey, DEFAULT_CALL_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, LimitNames,
    ModelConfig, RetryPolicy, StructuredOutput,
};
pub use error::{ClientError, InferenceError, MissingApiKey};
pub(crate) use request::PreparedRequest;
pub use request::ToolChoice;
pub(crate) use request::{InferenceRequest, ToolSpec};
pub(crate) use stitch::Completion;
