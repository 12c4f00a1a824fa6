//! What the server answers, in order: [`Script`] (a queue, a function, the echo workload,
//! or a JSON file of replies).

use std::collections::VecDeque;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::reply::{Reply, ToolCall, Usage};

/// A function that picks the reply for a request body.
type ReplyFn = Box<dyn FnMut(&Value) -> Reply + Send>;

/// Where replies come from once the queue is empty.
pub(crate) enum Generator {
    /// Nothing: the script is exhausted.
    None,
    /// A user function of the request body.
    Fn(ReplyFn),
    /// The echo workload: tool calls until `k` tool results are in the conversation.
    Echo(usize),
}

/// The sequence of replies a [`crate::ScriptedServer`] gives.
///
/// Requests consume the queued replies first, in order (including any added later with
/// [`crate::ScriptedServer::push`]); then the generator of [`Script::from_fn`] or
/// [`Script::echo_until`], if any, answers. A request that finds nothing to answer gets
/// HTTP 500 `scripted server: script exhausted after N requests`.
///
/// ```
/// use serde_json::{Value, json};
/// use treadle_scripted::{Reply, Script};
///
/// let fixed = Script::new([Reply::text("hi"), Reply::tool_call("echo", json!({}))]);
/// assert_eq!(fixed.len(), 2);
///
/// let by_request = Script::from_fn(|req: &Value| {
///     let n = req["messages"].as_array().map_or(0, Vec::len);
///     Reply::text(format!("you sent {n} messages"))
/// });
/// assert_eq!(by_request.len(), 0);
///
/// let from_file = Script::from_json(r#"[{"text": "hi", "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
///                                       {"status": 503, "retry_after": 1}]"#)?;
/// assert_eq!(from_file.len(), 2);
/// # Ok::<(), treadle_scripted::ScriptError>(())
/// ```
pub struct Script {
    pub(crate) queue: VecDeque<Reply>,
    pub(crate) generator: Generator,
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let generator = match self.generator {
            Generator::None => "none",
            Generator::Fn(_) => "fn",
            Generator::Echo(_) => "echo",
        };
        f.debug_struct("Script")
            .field("queue", &self.queue)
            .field("generator", &generator)
            .finish()
    }
}

impl Script {
    /// A fixed queue of replies, answered in order.
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        Self {
            queue: replies.into_iter().collect(),
            generator: Generator::None,
        }
    }

    /// Answers every request with `f(request_body)`. Never exhausted.
    pub fn from_fn(f: impl FnMut(&Value) -> Reply + Send + 'static) -> Self {
        Self {
            queue: VecDeque::new(),
            generator: Generator::Fn(Box::new(f)),
        }
    }

    /// The echo workload used by benchmarks. For each request, let `n` be the number of
    /// messages with role `"tool"` in `messages`. While `n < k`, the reply is one tool call
    /// `echo` with arguments `{"i":n}` and id `call_<n>`; after that it is the text
    /// `"done"`. Every reply carries usage. Never exhausted.
    pub fn echo_until(k: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            generator: Generator::Echo(k),
        }
    }

    /// Parses a JSON list of replies. Each element is an object with exactly one of
    /// `text`, `tool_calls` (`[{"name", "arguments", "id"?}]`; a string `arguments` is
    /// sent verbatim, anything else is serialized), `status` or `"malformed": true`,
    /// plus the optional modifiers `reasoning`, `usage` (`{"prompt_tokens",
    /// "completion_tokens", "cached_tokens"?}`), `body`, `retry_after`, `finish_reason`,
    /// `cut_after`, `block_after`. A `text` may also carry `tool_calls`.
    pub fn from_json(json: &str) -> Result<Self, ScriptError> {
        let specs: Vec<ReplySpec> = serde_json::from_str(json)?;
        let replies = specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                spec.into_reply()
                    .map_err(|reason| ScriptError::Invalid { index, reason })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(replies))
    }

    /// Number of queued replies (a generator is not counted).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no reply is queued (a generator may still answer).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The next reply, or `None` when exhausted. `body` is present whenever the
    /// generator is [`Generator::Fn`] (the server parses it for that case).
    pub(crate) fn next(&mut self, tool_messages: usize, body: Option<&Value>) -> Option<Reply> {
        if let Some(reply) = self.queue.pop_front() {
            return Some(reply);
        }
        match &mut self.generator {
            Generator::None => None,
            Generator::Fn(f) => body.map(f),
            Generator::Echo(k) => Some(echo_reply(tool_messages, *k)),
        }
    }

    /// True when answering may need the parsed request body.
    pub(crate) fn needs_body(&self) -> bool {
        matches!(self.generator, Generator::Fn(_))
    }
}

fn echo_reply(n: usize, k: usize) -> Reply {
    let prompt = 100 + 20 * n as u64;
    if n < k {
        Reply::tool_calls([ToolCall::raw("echo", format!("{{\"i\":{n}}}")).id(format!("call_{n}"))])
            .usage(prompt, 10)
    } else {
        Reply::text("done").usage(prompt, 1)
    }
}

/// Why a script file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The text is not a JSON list of reply objects.
    #[error("script is not a JSON list of replies: {0}")]
    Json(#[from] serde_json::Error),
    /// One reply object does not describe a reply.
    #[error("script reply #{index} is invalid: {reason}")]
    Invalid {
        /// Zero-based position in the list.
        index: usize,
        /// What is wrong with it.
        reason: InvalidReply,
    },
}

/// What makes one reply object describe no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidReply {
    /// None or several of the reply kinds.
    #[error("needs exactly one of `text`, `tool_calls`, `status`, `malformed`")]
    Kind,
    /// Both ways of ending a stream early.
    #[error("`cut_after` and `block_after` exclude each other")]
    CutAndBlock,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplySpec {
    text: Option<String>,
    tool_calls: Option<Vec<ToolCallSpec>>,
    status: Option<u16>,
    #[serde(default)]
    malformed: bool,
    reasoning: Option<String>,
    usage: Option<UsageSpec>,
    body: Option<String>,
    retry_after: Option<u64>,
    finish_reason: Option<String>,
    cut_after: Option<usize>,
    block_after: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallSpec {
    name: String,
    #[serde(default)]
    arguments: Value,
    id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageSpec {
    prompt_tokens: u64,
    completion_tokens: u64,
    #[serde(default)]
    cached_tokens: u64,
}

impl ReplySpec {
    fn into_reply(self) -> Result<Reply, InvalidReply> {
        let calls = self.tool_calls.map(|calls| {
            calls
                .into_iter()
                .map(|c| {
                    let call = match c.arguments {
                        Value::String(raw) => ToolCall::raw(c.name, raw),
                        Value::Null => ToolCall::raw(c.name, "{}"),
                        other => ToolCall::new(c.name, other),
                    };
                    match c.id {
                        Some(id) => call.id(id),
                        None => call,
                    }
                })
                .collect::<Vec<_>>()
        });
        let mut reply = match (self.text, calls, self.status, self.malformed) {
            (Some(text), calls, None, false) => {
                Reply::text(text).with_tool_calls(calls.unwrap_or_default())
            }
            (None, Some(calls), None, false) => Reply::tool_calls(calls),
            (None, None, Some(status), false) => {
                let mut r = Reply::status(status);
                if let Some(body) = self.body {
                    r = r.body(body);
                }
                if let Some(secs) = self.retry_after {
                    r = r.retry_after(secs);
                }
                r
            }
            (None, None, None, true) => Reply::malformed(),
            _ => {
                return Err(InvalidReply::Kind);
            }
        };
        if let Some(reasoning) = self.reasoning {
            reply = reply.reasoning(reasoning);
        }
        if let Some(u) = self.usage {
            reply.usage = Some(Usage {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
                cached_tokens: u.cached_tokens,
            });
        }
        if let Some(reason) = self.finish_reason {
            reply = reply.finish_reason(reason);
        }
        match (self.cut_after, self.block_after) {
            (Some(_), Some(_)) => {
                return Err(InvalidReply::CutAndBlock);
            }
            (Some(n), None) => reply = reply.cut_after(n),
            (None, Some(n)) => reply = reply.block_after(n),
            (None, None) => {}
        }
        Ok(reply)
    }
}
