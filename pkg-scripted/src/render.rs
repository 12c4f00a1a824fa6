//! Turns a [`Reply`] into wire bytes: SSE `chat.completion.chunk` frames or one
//! `chat.completion` JSON object, all written into a single buffer.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;

use crate::reply::{Ending, Kind, Reply, ToolCall, Usage};

/// Characters per streamed content / reasoning / arguments piece.
const PIECE_CHARS: usize = 4;

/// What the request asked for and how the server is configured, as far as rendering cares.
pub(crate) struct Ctx<'a> {
    pub request_index: usize,
    pub model: &'a str,
    pub created: u64,
    pub stream: bool,
    pub include_usage: bool,
    pub quirks: bool,
}

/// A renderer of one wire format (chat completions, Anthropic Messages, Responses).
pub(crate) type Renderer = fn(&Reply, &Ctx<'_>) -> serde_json::Result<Rendered>;

/// A rendered answer.
pub(crate) enum Rendered {
    /// A plain HTTP error.
    Status {
        status: u16,
        content_type: &'static str,
        body: Bytes,
        retry_after: Option<u64>,
    },
    /// A 200 answer: `frames` are consecutive slices of one buffer, sent in order, then `ending`.
    Ok {
        content_type: &'static str,
        frames: Frames,
        ending: Ending,
    },
}

/// Consecutive frames stored in one buffer.
pub(crate) struct Frames {
    pub buf: Bytes,
    /// End offset of each frame in `buf`.
    pub ends: Vec<usize>,
}

impl Frames {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Frame `i` as a cheap slice of the buffer.
    pub fn get(&self, i: usize) -> Option<Bytes> {
        let end = *self.ends.get(i)?;
        let start = i
            .checked_sub(1)
            .and_then(|j| self.ends.get(j))
            .copied()
            .unwrap_or(0);
        Some(self.buf.slice(start..end))
    }
}

#[derive(Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedOut,
}

#[derive(Serialize)]
struct CachedOut {
    cached_tokens: u64,
}

impl From<Usage> for UsageOut {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens(),
            prompt_tokens_details: CachedOut {
                cached_tokens: u.cached_tokens,
            },
        }
    }
}

/// The unknown field added to every object in quirks mode.
#[derive(Serialize)]
struct Quirk {
    provider: &'static str,
    nested: [u8; 2],
}

const QUIRK: Quirk = Quirk {
    provider: "scripted",
    nested: [1, 2],
};

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    x_scripted_quirk: Option<&'a Quirk>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[CallDelta<'a>; 1]>,
}

#[derive(Serialize)]
struct CallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FnDelta<'a>,
}

#[derive(Serialize)]
struct FnDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    x_scripted_quirk: Option<&'a Quirk>,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    message: Message<'a>,
    finish_reason: &'a str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<FullCall<'a>>,
}

#[derive(Serialize)]
struct FullCall<'a> {
    id: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FullFn<'a>,
}

#[derive(Serialize)]
struct FullFn<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// Splits `s` into pieces of at most [`PIECE_CHARS`] characters (on char boundaries).
fn pieces(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = rest
            .char_indices()
            .nth(PIECE_CHARS)
            .map_or(rest.len(), |(i, _)| i);
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

fn call_id<'a>(call: &'a ToolCall, ctx: &Ctx<'_>, index: usize) -> Cow<'a, str> {
    match &call.id {
        Some(id) => Cow::Borrowed(id),
        None => Cow::Owned(format!("call_{}_{index}", ctx.request_index)),
    }
}

/// Accumulates SSE frames into one buffer.
struct SseWriter<'c> {
    buf: Vec<u8>,
    ends: Vec<usize>,
    id: String,
    ctx: &'c Ctx<'c>,
    role_sent: bool,
}

impl<'c> SseWriter<'c> {
    fn new(ctx: &'c Ctx<'c>) -> Self {
        Self {
            buf: Vec::with_capacity(1024),
            ends: Vec::with_capacity(16),
            id: format!("chatcmpl-scripted-{}", ctx.request_index),
            ctx,
            role_sent: false,
        }
    }

    fn raw(&mut self, line: &[u8]) {
        self.buf.extend_from_slice(line);
        self.ends.push(self.buf.len());
    }

    fn chunk(
        &mut self,
        choices: &[ChunkChoice<'_>],
        usage: Option<Usage>,
    ) -> serde_json::Result<()> {
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.ctx.created,
            model: self.ctx.model,
            choices,
            usage: usage.map(UsageOut::from),
            x_scripted_quirk: self.ctx.quirks.then_some(&QUIRK),
        };
        self.buf.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut self.buf, &chunk)?;
        self.buf.extend_from_slice(b"\n\n");
        self.ends.push(self.buf.len());
        Ok(())
    }

    /// One intermediate delta; the first one carries `role: "assistant"`.
    fn delta(&mut self, mut delta: Delta<'_>) -> serde_json::Result<()> {
        if !self.role_sent {
            delta.role = Some("assistant");
            self.role_sent = true;
        }
        let finish_reason = self.ctx.quirks.then_some("");
        self.chunk(
            &[ChunkChoice {
                index: 0,
                delta,
                finish_reason,
            }],
            None,
        )
    }

    fn finish(mut self) -> Frames {
        self.raw(b"data: [DONE]\n\n");
        Frames {
            buf: Bytes::from(self.buf),
            ends: self.ends,
        }
    }
}

fn finish_reason(reply: &Reply, has_calls: bool) -> &str {
    match &reply.finish_reason {
        Some(r) => r,
        None if has_calls => "tool_calls",
        None => "stop",
    }
}

fn stream_message(
    ctx: &Ctx<'_>,
    reply: &Reply,
    content: Option<&str>,
    reasoning: Option<&str>,
    calls: &[ToolCall],
) -> serde_json::Result<Frames> {
    let mut w = SseWriter::new(ctx);
    for piece in reasoning.into_iter().flat_map(pieces) {
        w.delta(Delta {
            reasoning_content: Some(piece),
            ..Delta::default()
        })?;
    }
    for piece in content.into_iter().flat_map(pieces) {
        w.delta(Delta {
            content: Some(piece),
            ..Delta::default()
        })?;
    }
    for (index, call) in calls.iter().enumerate() {
        let id = call_id(call, ctx, index);
        w.delta(Delta {
            tool_calls: Some([CallDelta {
                index,
                id: Some(&id),
                kind: Some("function"),
                function: FnDelta {
                    name: Some(&call.name),
                    arguments: "",
                },
            }]),
            ..Delta::default()
        })?;
        for piece in pieces(&call.arguments) {
            w.delta(Delta {
                tool_calls: Some([CallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FnDelta {
                        name: None,
                        arguments: piece,
                    },
                }]),
                ..Delta::default()
            })?;
        }
    }
    if !w.role_sent {
        w.delta(Delta {
            content: Some(""),
            ..Delta::default()
        })?;
    }
    w.chunk(
        &[ChunkChoice {
            index: 0,
            delta: Delta::default(),
            finish_reason: Some(finish_reason(reply, !calls.is_empty())),
        }],
        None,
    )?;
    if let Some(usage) = reply.usage.filter(|_| ctx.include_usage && !ctx.quirks) {
        w.chunk(&[], Some(usage))?;
    }
    Ok(w.finish())
}

fn complete_message(
    ctx: &Ctx<'_>,
    reply: &Reply,
    content: Option<&str>,
    reasoning: Option<&str>,
    calls: &[ToolCall],
) -> serde_json::Result<Bytes> {
    let id = format!("chatcmpl-scripted-{}", ctx.request_index);
    let completion = Completion {
        id: &id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        choices: [CompletionChoice {
            index: 0,
            message: Message {
                role: "assistant",
                content,
                reasoning_content: reasoning,
                tool_calls: calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| FullCall {
                        id: call_id(call, ctx, i),
                        kind: "function",
                        function: FullFn {
                            name: &call.name,
                            arguments: &call.arguments,
                        },
                    })
                    .collect(),
            },
            finish_reason: finish_reason(reply, !calls.is_empty()),
        }],
        usage: (!ctx.quirks).then(|| reply.usage.unwrap_or_default().into()),
        x_scripted_quirk: ctx.quirks.then_some(&QUIRK),
    };
    Ok(Bytes::from(serde_json::to_vec(&completion)?))
}

const BAD_JSON: &[u8] = b"{\"id\": \"chatcmpl-scripted\", \"choices\": [this is not json";

/// Renders `reply` for the request described by `ctx`.
pub(crate) fn render(reply: &Reply, ctx: &Ctx<'_>) -> serde_json::Result<Rendered> {
    let (content_type, frames) = match &reply.kind {
        Kind::Status {
            status,
            body,
            retry_after,
        } => {
            let (content_type, body) = match body {
                Some(b) if serde_json::from_str::<serde::de::IgnoredAny>(b).is_ok() => {
                    ("application/json", Bytes::from(b.clone()))
                }
                Some(b) => ("text/plain; charset=utf-8", Bytes::from(b.clone())),
                None => {
                    let v = serde_json::json!({"error": {
                        "message": format!("scripted error (HTTP {status})"),
                        "type": "server_error",
                        "code": status,
                    }});
                    ("application/json", Bytes::from(serde_json::to_vec(&v)?))
                }
            };
            return Ok(Rendered::Status {
                status: *status,
                content_type,
                body,
                retry_after: *retry_after,
            });
        }
        Kind::Message {
            content,
            reasoning,
            tool_calls,
        } => {
            let (content, reasoning) = (content.as_deref(), reasoning.as_deref());
            if ctx.stream {
                let frames = stream_message(ctx, reply, content, reasoning, tool_calls)?;
                ("text/event-stream", frames)
            } else {
                let body = complete_message(ctx, reply, content, reasoning, tool_calls)?;
                ("application/json", single(body))
            }
        }
        Kind::Malformed => {
            if ctx.stream {
                let mut w = SseWriter::new(ctx);
                w.delta(Delta {
                    content: Some(""),
                    ..Delta::default()
                })?;
                let mut line = Vec::with_capacity(BAD_JSON.len() + 8);
                line.extend_from_slice(b"data: ");
                line.extend_from_slice(BAD_JSON);
                line.extend_from_slice(b"\n\n");
                w.raw(&line);
                ("text/event-stream", w.finish())
            } else {
                ("application/json", single(Bytes::from_static(BAD_JSON)))
            }
        }
    };
    let frames = match (reply.ending, ctx.stream) {
        (Ending::Complete, _) => frames,
        // A cut or blocked stream never sends `[DONE]`.
        (Ending::CutAfter(n) | Ending::BlockAfter(n), true) => truncate(frames, n),
        // A non-streaming body is one frame: a cut sends half of it, a block sends nothing.
        (Ending::CutAfter(_), false) => {
            let half = frames.buf.len() / 2;
            single(frames.buf.slice(..half))
        }
        (Ending::BlockAfter(_), false) => truncate(frames, 0),
    };
    Ok(Rendered::Ok {
        content_type,
        frames,
        ending: reply.ending,
    })
}

pub(crate) fn single(body: Bytes) -> Frames {
    let len = body.len();
    Frames {
        buf: body,
        ends: vec![len],
    }
}

/// Keeps the first `n` frames, never including the final `[DONE]`.
pub(crate) fn truncate(mut frames: Frames, n: usize) -> Frames {
    let keep = n.min(frames.len().saturating_sub(1));
    frames.ends.truncate(keep);
    let end = frames.ends.last().copied().unwrap_or(0);
    frames.buf.truncate(end);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_on_char_boundaries() {
        let parts: Vec<&str> = pieces("héllo wörld").collect();
        assert_eq!(parts.concat(), "héllo wörld");
        assert!(parts.iter().all(|p| p.chars().count() <= PIECE_CHARS));
        assert_eq!(pieces("").count(), 0);
    }
}
