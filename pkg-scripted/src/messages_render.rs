//! Turns a [`Reply`] into Anthropic Messages wire bytes: the SSE events of a streamed
//! message (`message_start` … `message_stop`) or one `message` JSON object.
//!
//! A reply's text becomes a `text` block and its tool calls `tool_use` blocks, in that
//! order; reasoning becomes a `thinking` block before them. Text and tool input are sent
//! in pieces, as a real server sends them, so a client that reads the stream as it arrives
//! is exercised.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::render::{Ctx, Frames, Rendered, single, truncate};
use crate::reply::{Ending, Kind, Reply, ToolCall, Usage};

/// Characters per streamed text / input piece.
const PIECE_CHARS: usize = 8;

/// The id of `call`, the `index`-th block of the answer to request `ctx.request_index`.
fn tool_id(call: &ToolCall, ctx: &Ctx<'_>, index: usize) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("toolu_{}_{index}", ctx.request_index))
}

/// The arguments of `call` as a JSON value (a raw string that is not JSON stays a string,
/// so a client sees what it was sent).
fn input(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

fn stop_reason(reply: &Reply, has_calls: bool) -> &str {
    match reply.finish_reason.as_deref() {
        // The chat-completions spellings a script may use, said the Messages way.
        Some("stop") | None if !has_calls => "end_turn",
        Some("tool_calls") | None => "tool_use",
        Some("length") => "max_tokens",
        Some(other) => other,
    }
}

fn usage_json(usage: Option<Usage>) -> Value {
    let u = usage.unwrap_or_default();
    json!({
        "input_tokens": u.prompt_tokens.saturating_sub(u.cached_tokens),
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": u.completion_tokens,
    })
}

/// `s` in pieces of at most [`PIECE_CHARS`] characters (the Responses renderer's too).
pub(crate) fn pieces(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .nth(PIECE_CHARS)
            .map_or(rest.len(), |(i, _)| i);
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

/// The content blocks of a message reply, complete.
fn blocks(
    ctx: &Ctx<'_>,
    content: Option<&str>,
    reasoning: Option<&str>,
    calls: &[ToolCall],
) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(thinking) = reasoning {
        out.push(json!({"type": "thinking", "thinking": thinking, "signature": "scripted"}));
    }
    if let Some(text) = content.filter(|t| !t.is_empty()) {
        out.push(json!({"type": "text", "text": text}));
    }
    let base = out.len();
    for (i, call) in calls.iter().enumerate() {
        out.push(json!({
            "type": "tool_use",
            "id": tool_id(call, ctx, base + i),
            "name": call.name,
            "input": input(call),
        }));
    }
    out
}

/// SSE frames, one per event (`event:` and `data:` lines), shared with the Responses
/// renderer, whose events have the same framing.
#[derive(Default)]
pub(crate) struct Events {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Events {
    pub(crate) fn event(&mut self, name: &str, data: &Value) -> serde_json::Result<()> {
        self.buf.extend_from_slice(b"event: ");
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b"\ndata: ");
        serde_json::to_writer(&mut self.buf, data)?;
        self.buf.extend_from_slice(b"\n\n");
        self.ends.push(self.buf.len());
        Ok(())
    }

    /// The frames written so far.
    pub(crate) fn frames(self) -> Frames {
        Frames {
            buf: Bytes::from(self.buf),
            ends: self.ends,
        }
    }
}

fn stream(
    ctx: &Ctx<'_>,
    reply: &Reply,
    blocks: &[Value],
    calls: bool,
) -> serde_json::Result<Frames> {
    let mut w = Events::default();
    // Input tokens are known when the message starts; output tokens come with its end.
    let mut start_usage = usage_json(reply.usage);
    start_usage["output_tokens"] = json!(1);
    w.event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_scripted_{}", ctx.request_index),
            "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        }}),
    )?;
    for (index, block) in blocks.iter().enumerate() {
        let (empty, deltas): (Value, Vec<Value>) = match block["type"].as_str() {
            Some("text") => (
                json!({"type": "text", "text": ""}),
                pieces(block["text"].as_str().unwrap_or_default())
                    .into_iter()
                    .map(|p| json!({"type": "text_delta", "text": p}))
                    .collect(),
            ),
            Some("thinking") => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                pieces(block["thinking"].as_str().unwrap_or_default())
                    .into_iter()
                    .map(|p| json!({"type": "thinking_delta", "thinking": p}))
                    .chain([json!({"type": "signature_delta", "signature": "scripted"})])
                    .collect(),
            ),
            _ => {
                let whole = block["input"].to_string();
                (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    pieces(&whole)
                        .into_iter()
                        .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                        .collect(),
                )
            }
        };
        w.event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": empty}),
        )?;
        for delta in deltas {
            w.event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )?;
        }
        w.event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )?;
    }
    let usage = reply.usage.unwrap_or_default();
    w.event(
        "message_delta",
        &json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply, calls), "stop_sequence": null},
            "usage": {"output_tokens": usage.completion_tokens}}),
    )?;
    w.event("message_stop", &json!({"type": "message_stop"}))?;
    Ok(w.frames())
}

/// An error body the Messages API's clients read (`{"type":"error","error":{...}}`).
fn error_body(status: u16) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": format!("scripted error (HTTP {status})")}})
}

/// Renders `reply` as the Messages API answers the request described by `ctx`.
pub(crate) fn render(reply: &Reply, ctx: &Ctx<'_>) -> serde_json::Result<Rendered> {
    let (content_type, frames) = match &reply.kind {
        Kind::Status {
            status,
            body,
            retry_after,
        } => {
            let body = match body {
                Some(b) => Bytes::from(b.clone()),
                None => Bytes::from(serde_json::to_vec(&error_body(*status))?),
            };
            return Ok(Rendered::Status {
                status: *status,
                content_type: "application/json",
                body,
                retry_after: *retry_after,
            });
        }
        Kind::Message {
            content,
            reasoning,
            tool_calls,
        } => {
            let all = blocks(ctx, content.as_deref(), reasoning.as_deref(), tool_calls);
            let calls = !tool_calls.is_empty();
            if ctx.stream {
                ("text/event-stream", stream(ctx, reply, &all, calls)?)
            } else {
                let message = json!({
                    "id": format!("msg_scripted_{}", ctx.request_index),
                    "type": "message", "role": "assistant", "model": ctx.model,
                    "content": all, "stop_reason": stop_reason(reply, calls),
                    "stop_sequence": null, "usage": usage_json(reply.usage),
                });
                (
                    "application/json",
                    single(Bytes::from(serde_json::to_vec(&message)?)),
                )
            }
        }
        Kind::Malformed => (
            "text/event-stream",
            single(Bytes::from_static(
                b"event: message_start\ndata: {\"type\": \"message_start\", [this is not json\n\n",
            )),
        ),
    };
    let frames = match reply.ending {
        Ending::Complete => frames,
        // A cut or blocked stream never sends `message_stop`.
        Ending::CutAfter(n) | Ending::BlockAfter(n) => truncate(frames, n),
    };
    Ok(Rendered::Ok {
        content_type,
        frames,
        ending: reply.ending,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(stream: bool) -> Ctx<'static> {
        Ctx {
            request_index: 3,
            model: "claude-test",
            created: 0,
            stream,
            include_usage: false,
            quirks: false,
        }
    }

    /// The data of every event, in order.
    fn events(frames: &Frames) -> Vec<Value> {
        String::from_utf8_lossy(&frames.buf)
            .split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn a_tool_use_streams_its_input_in_pieces_that_join_to_the_arguments() {
        let reply = Reply::text("Looking.")
            .with_tool_calls([ToolCall::new("Read", json!({"file_path": "notes/a.txt"}))])
            .usage(120, 7);
        let Rendered::Ok { frames, .. } = render(&reply, &ctx(true)).unwrap() else {
            panic!("not a message")
        };
        let events = events(&frames);
        assert_eq!(events[0]["message"]["usage"]["input_tokens"], 120);
        let partial: String = events
            .iter()
            .filter(|e| e["delta"]["type"] == "input_json_delta")
            .map(|e| e["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&partial).unwrap(),
            json!({"file_path": "notes/a.txt"})
        );
        let start = events
            .iter()
            .find(|e| e["content_block"]["type"] == "tool_use")
            .unwrap();
        assert_eq!(start["content_block"]["id"], "toolu_3_1");
        let end = &events[events.len() - 2];
        assert_eq!(end["delta"]["stop_reason"], "tool_use");
        assert_eq!(end["usage"]["output_tokens"], 7);
        assert_eq!(events.last().unwrap()["type"], "message_stop");
    }

    #[test]
    fn a_whole_message_has_its_blocks_and_stop_reason() {
        let Rendered::Ok { frames, .. } = render(&Reply::text("hi"), &ctx(false)).unwrap() else {
            panic!("not a message")
        };
        let v: Value = serde_json::from_slice(&frames.buf).unwrap();
        assert_eq!(v["content"], json!([{"type": "text", "text": "hi"}]));
        assert_eq!(v["stop_reason"], "end_turn");
    }
}
