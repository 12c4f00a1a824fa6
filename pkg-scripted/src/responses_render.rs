//! Turns a [`Reply`] into OpenAI Responses API wire bytes (`POST /v1/responses`, which the
//! Codex CLI speaks): the SSE events of a streamed response (`response.created` …
//! `response.completed`) or one `response` JSON object.
//!
//! A reply's reasoning becomes a `reasoning` item with a summary, its text a `message`
//! item, and each tool call a `function_call` item, in that order. Text and arguments are
//! sent as deltas in pieces before each item's `response.output_item.done`, as a real
//! server sends them. A tool named `mcp__SERVER__TOOL` is sent in the namespace
//! `mcp__SERVER` as `TOOL`: that is how the Codex CLI offers an MCP server's tools (a
//! `namespace` tool), and how it expects them called.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::messages_render::{Events, pieces};
use crate::render::{Ctx, Frames, Rendered, single, truncate};
use crate::reply::{Ending, Kind, Reply, ToolCall, Usage};

fn usage_json(usage: Option<Usage>) -> Value {
    let u = usage.unwrap_or_default();
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens(),
    })
}

/// The `function_call` item of `call`, the `index`-th item of the answer.
fn call_item(call: &ToolCall, ctx: &Ctx<'_>, index: usize) -> Value {
    let call_id = call
        .id
        .clone()
        .unwrap_or_else(|| format!("call_{}_{index}", ctx.request_index));
    let mut item = json!({
        "type": "function_call", "id": format!("fc_{}_{index}", ctx.request_index),
        "call_id": call_id, "name": call.name, "arguments": call.arguments, "status": "completed",
    });
    if let Some((namespace, name)) = call
        .name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        item["namespace"] = json!(format!("mcp__{namespace}"));
        item["name"] = json!(name);
    }
    item
}

/// The output items of a message reply, complete.
fn items(
    ctx: &Ctx<'_>,
    content: Option<&str>,
    reasoning: Option<&str>,
    calls: &[ToolCall],
) -> Vec<Value> {
    let n = ctx.request_index;
    let mut out = Vec::new();
    if let Some(thinking) = reasoning {
        out.push(json!({"type": "reasoning", "id": format!("rs_{n}"),
            "summary": [{"type": "summary_text", "text": thinking}]}));
    }
    if let Some(text) = content.filter(|t| !t.is_empty()) {
        out.push(
            json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    let base = out.len();
    for (i, call) in calls.iter().enumerate() {
        out.push(call_item(call, ctx, base + i));
    }
    out
}

/// One item streamed: added (empty), its deltas, done (whole).
fn stream_item(w: &mut Events, index: usize, item: &Value) -> serde_json::Result<()> {
    let id = &item["id"];
    let (empty, deltas) = match item["type"].as_str() {
        Some("message") => {
            let mut empty = item.clone();
            empty["content"] = json!([]);
            empty["status"] = json!("in_progress");
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            let deltas: Vec<(&str, Value)> = pieces(text)
                .into_iter()
                .map(|p| {
                    (
                        "response.output_text.delta",
                        json!({"type": "response.output_text.delta",
                        "item_id": id, "output_index": index, "content_index": 0, "delta": p}),
                    )
                })
                .collect();
            (empty, deltas)
        }
        Some("function_call") => {
            let mut empty = item.clone();
            empty["arguments"] = json!("");
            empty["status"] = json!("in_progress");
            let args = item["arguments"].as_str().unwrap_or_default();
            let deltas = pieces(args)
                .into_iter()
                .map(|p| {
                    (
                        "response.function_call_arguments.delta",
                        json!({
                        "type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": index, "delta": p}),
                    )
                })
                .collect();
            (empty, deltas)
        }
        _ => (item.clone(), Vec::new()),
    };
    w.event(
        "response.output_item.added",
        &json!({"type": "response.output_item.added", "output_index": index, "item": empty}),
    )?;
    for (name, delta) in deltas {
        w.event(name, &delta)?;
    }
    w.event(
        "response.output_item.done",
        &json!({"type": "response.output_item.done", "output_index": index, "item": item}),
    )
}

fn response(ctx: &Ctx<'_>, status: &str, output: &[Value], usage: Option<Value>) -> Value {
    json!({
        "id": format!("resp_scripted_{}", ctx.request_index), "object": "response",
        "created_at": ctx.created, "status": status, "model": ctx.model,
        "output": output, "usage": usage,
    })
}

fn stream(ctx: &Ctx<'_>, reply: &Reply, output: &[Value]) -> serde_json::Result<Frames> {
    let mut w = Events::default();
    w.event(
        "response.created",
        &json!({"type": "response.created", "response": response(ctx, "in_progress", &[], None)}),
    )?;
    for (index, item) in output.iter().enumerate() {
        stream_item(&mut w, index, item)?;
    }
    let done = response(ctx, "completed", output, Some(usage_json(reply.usage)));
    w.event(
        "response.completed",
        &json!({"type": "response.completed", "response": done}),
    )?;
    Ok(w.frames())
}

/// Renders `reply` as the Responses API answers the request described by `ctx`.
pub(crate) fn render(reply: &Reply, ctx: &Ctx<'_>) -> serde_json::Result<Rendered> {
    let (content_type, frames) = match &reply.kind {
        Kind::Status {
            status,
            body,
            retry_after,
        } => {
            let body = match body {
                Some(b) => Bytes::from(b.clone()),
                None => Bytes::from(serde_json::to_vec(&json!({"error": {
                    "message": format!("scripted error (HTTP {status})"),
                    "type": if *status == 429 { "rate_limit_error" } else { "server_error" },
                }}))?),
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
            let output = items(ctx, content.as_deref(), reasoning.as_deref(), tool_calls);
            if ctx.stream {
                ("text/event-stream", stream(ctx, reply, &output)?)
            } else {
                let whole = response(ctx, "completed", &output, Some(usage_json(reply.usage)));
                (
                    "application/json",
                    single(Bytes::from(serde_json::to_vec(&whole)?)),
                )
            }
        }
        Kind::Malformed => (
            "text/event-stream",
            single(Bytes::from_static(
                b"event: response.created\ndata: {\"type\": \"response.created\", [this is not json\n\n",
            )),
        ),
    };
    let frames = match reply.ending {
        Ending::Complete => frames,
        // A cut or blocked stream never sends `response.completed`.
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

    /// The arguments of a rendered call, parsed.
    fn arguments(item: &Value) -> Value {
        serde_json::from_str(item["arguments"].as_str().unwrap_or_default()).unwrap_or(Value::Null)
    }

    fn ctx(stream: bool) -> Ctx<'static> {
        Ctx {
            request_index: 2,
            model: "codex-test",
            created: 0,
            stream,
            include_usage: true,
            quirks: false,
        }
    }

    fn events(frames: &Frames) -> Vec<Value> {
        String::from_utf8_lossy(&frames.buf)
            .split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn a_call_streams_its_arguments_in_pieces_and_an_mcp_tool_gets_its_namespace() {
        let reply = Reply::text("Looking.")
            .with_tool_calls([
                ToolCall::new("exec_command", json!({"cmd": "cat notes/a.txt"})),
                ToolCall::new("mcp__treadle__verdict", json!({"choice": "approve"})),
            ])
            .usage(120, 7);
        let Rendered::Ok { frames, .. } = render(&reply, &ctx(true)).unwrap() else {
            panic!("not a message")
        };
        let events = events(&frames);
        assert_eq!(events[0]["type"], "response.created");
        let joined: String = events
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .filter(|e| e["output_index"] == 1)
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&joined).unwrap(),
            json!({"cmd": "cat notes/a.txt"})
        );
        let done: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| &e["item"])
            .collect();
        assert_eq!(done[0]["content"][0]["text"], "Looking.");
        assert_eq!(done[1]["call_id"], "call_2_1");
        assert_eq!(
            (&done[2]["namespace"], &done[2]["name"]),
            (&json!("mcp__treadle"), &json!("verdict"))
        );
        assert_eq!(arguments(done[2]), json!({"choice": "approve"}));
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["usage"]["output_tokens"], 7);
        assert_eq!(last["response"]["usage"]["input_tokens"], 120);
    }

    #[test]
    fn a_whole_response_has_its_output_items() {
        let Rendered::Ok { frames, .. } = render(&Reply::text("hi"), &ctx(false)).unwrap() else {
            panic!("not a message")
        };
        let v: Value = serde_json::from_slice(&frames.buf).unwrap();
        assert_eq!(v["output"][0]["content"][0]["text"], "hi");
        assert_eq!(v["status"], "completed");
    }
}
