//! What one scripted answer looks like: [`Reply`], [`ToolCall`] and [`Usage`].

use serde_json::Value;

/// Token counts reported for one reply, in OpenAI's `usage` shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `prompt_tokens`.
    pub prompt_tokens: u64,
    /// `completion_tokens`.
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: u64,
}

impl Usage {
    /// `prompt_tokens + completion_tokens`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// One function call the scripted model makes.
///
/// ```
/// use serde_json::json;
/// use treadle_scripted::ToolCall;
///
/// let call = ToolCall::new("read", json!({"path": "a.txt"})).id("call_read");
/// assert_eq!(call.arguments(), r#"{"path":"a.txt"}"#);
/// // Arguments that are not valid JSON, to test how a client copes:
/// let broken = ToolCall::raw("read", "{\"path\": ");
/// assert_eq!(broken.name(), "read");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

impl ToolCall {
    /// A call of `name` with `arguments` serialized as compact JSON.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self::raw(name, arguments.to_string())
    }

    /// A call whose arguments string is sent verbatim (it need not be valid JSON).
    pub fn raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// Sets the call id. Without one, the server makes a unique id
    /// `call_<request>_<index>` when it answers.
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The function name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments string as it is sent.
    pub fn arguments(&self) -> &str {
        &self.arguments
    }
}

/// How the response ends once its chunks are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Normal end: `data: [DONE]` (streaming) or the full body.
    Complete,
    /// Send this many chunks, then drop the connection.
    CutAfter(usize),
    /// Send this many chunks, then hold the connection open until the client leaves.
    BlockAfter(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Message {
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    Status {
        status: u16,
        body: Option<String>,
        retry_after: Option<u64>,
    },
    Malformed,
}

/// One scripted answer to one chat-completions request.
///
/// Builder methods that do not apply to a kind of reply are ignored by it: `body` and
/// `retry_after` only affect [`Reply::status`]; `reasoning`, `usage` and
/// `with_tool_calls` only affect message replies. `cut_after` and `block_after` apply to
/// every kind except `status`.
///
/// ```
/// use serde_json::json;
/// use treadle_scripted::{Reply, ToolCall};
///
/// let replies = [
///     Reply::text("Hello there").usage(10, 5),
///     Reply::tool_calls([ToolCall::new("echo", json!({"i": 1})), ToolCall::new("read", json!({}))]),
///     Reply::tool_call("echo", json!({"i": 2})),
///     Reply::status(429).retry_after(2),
///     Reply::status(500).body("boom"),
///     Reply::malformed(),
///     Reply::text("partial answer ...").cut_after(2),
///     Reply::text("x").block_after(1),
///     Reply::text("thinking").reasoning("let me think"),
/// ];
/// assert_eq!(replies.len(), 9);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub(crate) kind: Kind,
    pub(crate) usage: Option<Usage>,
    pub(crate) served_model: Option<String>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) ending: Ending,
}

impl Reply {
    fn message(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            kind: Kind::Message {
                content,
                reasoning: None,
                tool_calls,
            },
            usage: None,
            served_model: None,
            finish_reason: None,
            ending: Ending::Complete,
        }
    }

    /// Reports `model` as the model that answered, instead of the one the request named
    /// (a router or an alias serves a model of another name).
    #[must_use]
    pub fn served_model(mut self, model: impl Into<String>) -> Self {
        self.served_model = Some(model.into());
        self
    }

    /// An assistant text answer (`finish_reason: "stop"`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(Some(text.into()), Vec::new())
    }

    /// One tool call (`finish_reason: "tool_calls"`).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([ToolCall::new(name, arguments)])
    }

    /// Parallel tool calls, streamed with indices 0, 1, 2, … in this order.
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self::message(None, calls.into_iter().collect())
    }

    /// A plain HTTP error with this status. The default body is an OpenAI-style
    /// `{"error": {...}}` JSON object; see [`Reply::body`].
    pub fn status(status: u16) -> Self {
        Self {
            kind: Kind::Status {
                status,
                body: None,
                retry_after: None,
            },
            usage: None,
            served_model: None,
            finish_reason: None,
            ending: Ending::Complete,
        }
    }

    /// A 200 response whose payload is not JSON: when streaming, one valid chunk, then a
    /// `data:` line that does not parse, then `[DONE]`; otherwise a body that does not parse.
    pub fn malformed() -> Self {
        Self {
            kind: Kind::Malformed,
            usage: None,
            served_model: None,
            finish_reason: None,
            ending: Ending::Complete,
        }
    }

    /// Sets the body of a [`Reply::status`] reply (sent as `application/json` if it
    /// parses as JSON, else as `text/plain`).
    #[must_use]
    pub fn body(mut self, body: impl Into<String>) -> Self {
        if let Kind::Status { body: b, .. } = &mut self.kind {
            *b = Some(body.into());
        }
        self
    }

    /// Adds a `Retry-After: <secs>` header to a [`Reply::status`] reply.
    #[must_use]
    pub fn retry_after(mut self, secs: u64) -> Self {
        if let Kind::Status { retry_after, .. } = &mut self.kind {
            *retry_after = Some(secs);
        }
        self
    }

    /// Reports this usage (`prompt_tokens`, `completion_tokens`). Streamed as a final
    /// `choices: []` chunk only when the request asked for `stream_options.include_usage`.
    #[must_use]
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        let cached_tokens = self.usage.map_or(0, |u| u.cached_tokens);
        self.usage = Some(Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        });
        self
    }

    /// Sets `prompt_tokens_details.cached_tokens` (and turns usage on if it was off).
    #[must_use]
    pub fn cached_tokens(mut self, cached: u64) -> Self {
        let mut usage = self.usage.unwrap_or_default();
        usage.cached_tokens = cached;
        self.usage = Some(usage);
        self
    }

    /// Streams `reasoning_content` deltas before the content / tool calls.
    #[must_use]
    pub fn reasoning(mut self, reasoning: impl Into<String>) -> Self {
        if let Kind::Message { reasoning: r, .. } = &mut self.kind {
            *r = Some(reasoning.into());
        }
        self
    }

    /// Adds tool calls after the text of a message reply (text and calls in one answer).
    #[must_use]
    pub fn with_tool_calls(mut self, calls: impl IntoIterator<Item = ToolCall>) -> Self {
        if let Kind::Message { tool_calls, .. } = &mut self.kind {
            tool_calls.extend(calls);
        }
        self
    }

    /// Overrides the final `finish_reason` (default: `"tool_calls"` when the reply has
    /// calls, else `"stop"`), e.g. `"length"`.
    #[must_use]
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Sends `n` chunks (`data:` lines; for a non-streaming request, part of the body),
    /// then drops the connection without `[DONE]`.
    #[must_use]
    pub fn cut_after(mut self, n: usize) -> Self {
        self.ending = Ending::CutAfter(n);
        self
    }

    /// Sends `n` chunks, then keeps the connection open, sending nothing, until the
    /// client goes away (see [`crate::ScriptedServer::wait_disconnects`]).
    #[must_use]
    pub fn block_after(mut self, n: usize) -> Self {
        self.ending = Ending::BlockAfter(n);
        self
    }
}
