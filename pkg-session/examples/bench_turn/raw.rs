//! The floor of the turn benchmark: the echo workload by a plain reqwest + serde_json
//! streaming loop, with nothing between the HTTP client and the conversation.
//!
//! Each session keeps its messages in typed structs, serializes the whole request each step
//! (as any chat-completions client must: the API is stateless), reads the SSE stream frame
//! by frame, decodes each `data:` line into borrowed structs, gathers the tool call and
//! answers it with the echo. No journal, no events, no validation: what a careful hand-written
//! client costs.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error>;

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    stream: bool,
    stream_options: StreamOptions,
    messages: &'a [Message],
    tools: &'a serde_json::Value,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

#[derive(Serialize, Default)]
struct CallOut {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut,
}

#[derive(Serialize, Default)]
struct FunctionOut {
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<Choice<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Delta<'a>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Vec<CallDelta<'a>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    index: usize,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

/// Runs `sessions` conversations at once; the wall time of all of them. Fails unless every
/// one made exactly `steps` tool steps and then answered.
pub async fn run(
    endpoint: &str,
    model: &str,
    steps: u32,
    sessions: usize,
) -> Result<(Duration, Duration), BoxError> {
    // The same TLS provider treadle installs (reqwest is built without one); the server
    // is plain HTTP, but building a client needs a provider all the same.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", endpoint.trim_end_matches('/'));
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "echo", "description": "Returns its argument.",
        "parameters": {"type": "object", "properties": {"i": {}}, "required": ["i"]}}}]);
    let (started, cpu) = (Instant::now(), super::cpu_time());
    let runs = (0..sessions).map(|_| conversation(&client, &url, model, &tools));
    let made = futures::future::join_all(runs).await;
    let (wall, cpu) = (started.elapsed(), super::cpu_time().saturating_sub(cpu));
    for tool_steps in made {
        let tool_steps = tool_steps?;
        if tool_steps != steps {
            return Err(format!("a session made {tool_steps} tool steps, not {steps}").into());
        }
    }
    Ok((wall, cpu))
}

/// One conversation to its text answer; the number of tool steps it made.
async fn conversation(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    tools: &serde_json::Value,
) -> Result<u32, BoxError> {
    let mut messages = vec![Message {
        role: "user",
        content: Some("Call echo until told to stop.".into()),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }];
    let mut tool_steps = 0;
    loop {
        let body = serde_json::to_vec(&Request {
            model,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            messages: &messages,
            tools,
        })?;
        let response = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await?
            .error_for_status()?;
        let (content, calls) = read_stream(response).await?;
        if calls.is_empty() {
            return Ok(tool_steps);
        }
        tool_steps += 1;
        let results: Vec<Message> = calls
            .iter()
            .map(|call| {
                let args: serde_json::Value = serde_json::from_str(&call.function.arguments)?;
                Ok(Message {
                    role: "tool",
                    content: Some(args["i"].to_string()),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(call.id.clone()),
                })
            })
            .collect::<Result<_, serde_json::Error>>()?;
        messages.push(Message {
            role: "assistant",
            content: (!content.is_empty()).then_some(content),
            tool_calls: calls,
            tool_call_id: None,
        });
        messages.extend(results);
    }
}

/// Reads one streamed answer: its text and its tool calls.
async fn read_stream(response: reqwest::Response) -> Result<(String, Vec<CallOut>), BoxError> {
    let mut stream = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut content = String::new();
    let mut calls: Vec<CallOut> = Vec::new();
    while let Some(bytes) = stream.next().await {
        pending.extend_from_slice(&bytes?);
        let mut start = 0;
        while let Some(end) = find(&pending[start..], b"\n\n") {
            let frame = &pending[start..start + end];
            start += end + 2;
            let Some(data) = frame.strip_prefix(b"data: ") else {
                continue;
            };
            if data == b"[DONE]" {
                continue;
            }
            let chunk: Chunk = serde_json::from_slice(data)?;
            for choice in chunk.choices {
                if let Some(text) = choice.delta.content {
                    content.push_str(&text);
                }
                for delta in choice.delta.tool_calls {
                    if calls.len() <= delta.index {
                        calls.resize_with(delta.index + 1, || CallOut {
                            kind: "function",
                            ..CallOut::default()
                        });
                    }
                    let call = &mut calls[delta.index];
                    if let Some(id) = delta.id {
                        call.id.push_str(&id);
                    }
                    if let Some(function) = delta.function {
                        if let Some(name) = function.name {
                            call.function.name.push_str(&name);
                        }
                        if let Some(arguments) = function.arguments {
                            call.function.arguments.push_str(&arguments);
                        }
                    }
                }
            }
        }
        pending.drain(..start);
    }
    Ok((content, calls))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
