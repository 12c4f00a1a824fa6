//! treadle-scripted: a scripted OpenAI-compatible chat-completions server over real HTTP
//! and SSE on loopback, for tests, doc tests and benchmarks. It speaks the Anthropic
//! Messages API too (`POST /v1/messages`), so a coding-agent CLI can be driven by a script.
//!
//! The server answers `POST /v1/chat/completions` (and `/chat/completions`) from a
//! [`Script`] of [`Reply`]s: streamed text, reasoning, single and parallel tool calls,
//! usage, HTTP errors with `Retry-After`, malformed SSE data, a stream cut mid-answer, and
//! a stream that blocks until the client goes away. It depends on no other treadle crate,
//! so any crate can dev-depend on it.
//!
//! ```
//! use serde_json::json;
//! use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), treadle_scripted::ServerError> {
//! let server = ScriptedServer::start(Script::new([
//!     Reply::tool_calls([
//!         ToolCall::new("echo", json!({"i": 1})),
//!         ToolCall::new("read", json!({"p": "a"})),
//!     ]),
//!     Reply::text("Hello there").usage(10, 5),
//! ]))
//! .await?;
//! let base_url = server.base_url(); // "http://127.0.0.1:PORT/v1"
//! # let _ = base_url;
//! // ... run a client against base_url, then inspect what it sent:
//! assert!(server.requests().is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! # Wire behaviour
//!
//! * `"stream": true`: `text/event-stream` of `data: {chat.completion.chunk}` frames, then
//!   `data: [DONE]`. The first delta carries `role: "assistant"`. Reasoning, then text,
//!   then tool calls are split into pieces of at most 4 characters. A tool call starts
//!   with a delta holding `index`, `id`, `type` and `function.name` with empty arguments;
//!   its arguments follow in pieces under the same `index`. A final delta is empty with
//!   the `finish_reason`. If the request set `stream_options.include_usage` and the reply
//!   has usage, a `choices: []` chunk with `usage` comes before `[DONE]`.
//! * Otherwise: one `chat.completion` object, with usage (zeros when the reply has none).
//! * Tool call ids default to `call_<request>_<index>`, unique per server.
//! * An exhausted script answers HTTP 500 `scripted server: script exhausted after N
//!   requests`; a body that is not JSON answers 400. Neither consumes a reply.
//!
//! * `POST /v1/messages` (base URL [`ScriptedServer::messages_base_url`]) answers from the
//!   same script in the Messages API's shape: `message_start`, one content block per
//!   reasoning / text / tool call (`thinking`, `text`, `tool_use`, their deltas in pieces
//!   of at most 8 characters), `message_delta` with the stop reason and output tokens,
//!   `message_stop`; or one `message` object without `"stream": true`. Tool use ids
//!   default to `toolu_<request>_<block>`. `POST /v1/messages/count_tokens` answers a size
//!   estimate without taking a reply.
//! * `POST /v1/responses` (base URL [`ScriptedServer::base_url`]; the Codex CLI speaks it)
//!   answers from the same script in the Responses API's shape: `response.created`, one
//!   output item per reasoning / text / tool call (`reasoning`, `message`,
//!   `function_call`; added, its deltas in pieces of at most 8 characters, done), then
//!   `response.completed` with the usage; or one `response` object without
//!   `"stream": true`. Call ids default to `call_<request>_<item>`. A tool named
//!   `mcp__SERVER__TOOL` is called as `TOOL` in the namespace `mcp__SERVER`, as Codex
//!   offers an MCP server's tools.
//!
//! # Layout
//!
//! * `reply.rs`: [`Reply`], [`ToolCall`], [`Usage`]: what one answer is.
//! * `script.rs`: [`Script`]: the queue, `from_fn`, the echo workload, JSON script files.
//! * `render.rs`: reply → wire bytes (SSE frames or one JSON object) in one buffer.
//! * `server.rs`: [`ScriptedServer`], [`ServerBuilder`], the axum handlers.
//! * `request.rs`: what the server reads of a request.
//! * `api.rs`: what differs between the Messages and Responses APIs' handlers.
//! * `messages_render.rs`: reply → Messages wire bytes (SSE events or one `message`).
//! * `responses_render.rs`: reply → Responses wire bytes (SSE events or one `response`).
//! * `pace.rs`: seeded delays and the paced / cut / blocking body stream.
//! * `main.rs`: the `treadle-scripted` binary, to benchmark other frameworks against the
//!   same server.
//!
//! # Dependencies
//!
//! * `tokio`: runtime, loopback listener, timers, `watch` counters.
//! * `axum` (hyper underneath): HTTP/1 server; its body streams carry SSE frames.
//! * `serde` / `serde_json`: request parsing and chunk serialization.
//! * `futures`: `stream::unfold` for paced, cut and blocking bodies.
//! * `bytes`: one buffer per answer, sliced into frames without copying.
//! * `thiserror`: [`ServerError`], [`ScriptError`], [`InvalidReply`].
//! * `tracing`: debug logs; a warning when the script runs out.
//! * `clap`: argument parsing of the binary only.
//!
//! Jitter uses an inline splitmix64 generator rather than `rand`.

mod api;
mod messages_render;
mod pace;
mod render;
mod reply;
mod request;
mod responses_render;
mod script;
mod server;

pub use reply::{Reply, ToolCall, Usage};
pub use script::{InvalidReply, Script, ScriptError};
pub use server::{RecordedRequest, ScriptedServer, ServerBuilder, ServerError};
