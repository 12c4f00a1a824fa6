//! Test helpers: post chat requests over real HTTP and split SSE bodies into data lines.

#![allow(dead_code)]

use futures::StreamExt;
use serde_json::{Value, json};

pub fn client() -> reqwest::Client {
    // Err: already installed, which is what is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub fn chat_body(stream: bool, include_usage: bool) -> Value {
    let mut body = json!({
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    });
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

pub async fn post(base_url: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{base_url}/chat/completions"))
        .header("authorization", "Bearer test-key")
        .json(body)
        .send()
        .await
        .expect("request reaches the scripted server")
}

/// Splits an SSE body into its `data:` payloads.
pub fn data_lines(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            f.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("frame without data prefix: {f:?}"))
                .to_owned()
        })
        .collect()
}

/// A finished SSE stream: the JSON chunks and whether `[DONE]` ended it.
pub struct Sse {
    pub chunks: Vec<Value>,
    pub done: bool,
}

pub async fn stream(base_url: &str, body: &Value) -> Sse {
    let resp = post(base_url, body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    parse_sse(&resp.text().await.unwrap())
}

pub fn parse_sse(text: &str) -> Sse {
    let lines = data_lines(text);
    let done = lines.last().map(String::as_str) == Some("[DONE]");
    let chunks = lines
        .iter()
        .filter(|l| *l != "[DONE]")
        .map(|l| serde_json::from_str(l).expect("chunk is JSON"))
        .collect();
    Sse { chunks, done }
}

/// Reads a body until it ends or fails; returns the bytes read and whether it failed.
pub async fn read_until_error(resp: reqwest::Response) -> (String, bool) {
    let mut body = resp.bytes_stream();
    let mut text = Vec::new();
    while let Some(item) = body.next().await {
        match item {
            Ok(b) => text.extend_from_slice(&b),
            Err(_) => return (String::from_utf8(text).unwrap(), true),
        }
    }
    (String::from_utf8(text).unwrap(), false)
}

/// Concatenates `choices[0].delta.<field>` over the chunks.
pub fn joined(chunks: &[Value], field: &str) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"][field].as_str())
        .collect()
}

/// Stitches streamed tool calls by index into `(id, name, arguments)`.
pub fn stitched_calls(chunks: &[Value]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in chunks {
        let Some(deltas) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in deltas {
            let index = d["index"]
                .as_u64()
                .expect("every tool-call delta has an index") as usize;
            if index == calls.len() {
                calls.push(Default::default());
            }
            let call = &mut calls[index];
            if let Some(id) = d["id"].as_str() {
                call.0.push_str(id);
            }
            if let Some(name) = d["function"]["name"].as_str() {
                call.1.push_str(name);
            }
            if let Some(args) = d["function"]["arguments"].as_str() {
                call.2.push_str(args);
            }
        }
    }
    calls
}
