//! Streaming and non-streaming answers: text, reasoning, tool calls, usage, quirks.

mod common;

use common::*;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

#[tokio::test]
async fn text_streams_in_pieces_that_reassemble() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("Hello there, world!").usage(10, 5)
    ]))
    .await
    .unwrap();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert!(sse.done, "stream ends with [DONE]");
    let content_chunks = sse
        .chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .count();
    assert!(content_chunks >= 3, "text is split into several pieces");
    assert_eq!(joined(&sse.chunks, "content"), "Hello there, world!");
    for c in &sse.chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "test-model");
        assert!(c["id"].is_string() && c["created"].is_u64());
        assert_eq!(c["choices"][0]["index"], 0);
    }
    assert_eq!(sse.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = sse.chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    // Intermediate chunks have finish_reason null; no usage chunk without include_usage.
    assert!(
        sse.chunks[..sse.chunks.len() - 1]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    assert!(sse.chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn usage_chunk_only_when_include_usage() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("a").usage(10, 5).cached_tokens(4),
        Reply::text("b").usage(10, 5),
        Reply::text("c"),
    ]))
    .await
    .unwrap();
    let with = stream(server.base_url(), &chat_body(true, true)).await;
    let usage_chunk = &with.chunks[with.chunks.len() - 1];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
               "prompt_tokens_details": {"cached_tokens": 4}})
    );
    assert!(with.done);

    let without = stream(server.base_url(), &chat_body(true, false)).await;
    assert!(without.chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        without.chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // Requested, but the reply has none: no usage chunk.
    let none = stream(server.base_url(), &chat_body(true, true)).await;
    assert!(none.chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn tool_call_deltas_carry_index_and_reassemble() {
    let args = json!({"path": "some/long/file/name.txt", "lines": [1, 2, 3]});
    let server = ScriptedServer::start(Script::new([Reply::tool_call("read", args.clone())]))
        .await
        .unwrap();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    let deltas: Vec<&Value> = sse
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert!(deltas.len() >= 3, "header plus several argument pieces");
    assert!(deltas.iter().all(|d| d["index"] == 0));
    let first = deltas[0];
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "read");
    assert_eq!(first["function"]["arguments"], "");
    assert!(first["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(deltas[1..].iter().all(|d| d.get("id").is_none()));

    let calls = stitched_calls(&sse.chunks);
    assert_eq!(calls.len(), 1);
    let parsed: Value = serde_json::from_str(&calls[0].2).expect("arguments reassemble into JSON");
    assert_eq!(parsed, args);
    assert_eq!(
        sse.chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn parallel_calls_use_indices_and_unique_ids() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([
            ToolCall::new("echo", json!({"i": 1})),
            ToolCall::new("read", json!({"p": "a"})),
            ToolCall::new("echo", json!({"i": 3})).id("mine"),
        ]),
        Reply::tool_call("echo", json!({"i": 2})),
    ]))
    .await
    .unwrap();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    let calls = stitched_calls(&sse.chunks);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].1, "echo");
    assert_eq!(calls[1].1, "read");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[1].2).unwrap(),
        json!({"p": "a"})
    );
    assert_eq!(calls[2].0, "mine");
    let next = stream(server.base_url(), &chat_body(true, false)).await;
    let next_calls = stitched_calls(&next.chunks);
    let mut ids: Vec<&str> = calls
        .iter()
        .chain(&next_calls)
        .map(|c| c.0.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "tool call ids are unique across replies");
}

#[tokio::test]
async fn reasoning_streams_before_content() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("thinking done").reasoning("let me think")
    ]))
    .await
    .unwrap();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "reasoning_content"), "let me think");
    assert_eq!(joined(&sse.chunks, "content"), "thinking done");
    let last_reasoning = sse
        .chunks
        .iter()
        .rposition(|c| c["choices"][0]["delta"]["reasoning_content"].is_string())
        .unwrap();
    let first_content = sse
        .chunks
        .iter()
        .position(|c| c["choices"][0]["delta"]["content"].is_string())
        .unwrap();
    assert!(last_reasoning < first_content);
}

#[tokio::test]
async fn non_streaming_answer_is_one_completion_object() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("Hello").usage(7, 3),
        Reply::tool_calls([
            ToolCall::new("echo", json!({"i": 1})),
            ToolCall::new("read", json!({})),
        ]),
    ]))
    .await
    .unwrap();
    let resp = post(server.base_url(), &chat_body(false, false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["total_tokens"], 10);

    // `stream` absent means non-streaming too.
    let body = json!({"model": "m", "messages": []});
    let v: Value = post(server.base_url(), &body).await.json().await.unwrap();
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "echo");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"i":1}"#);
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    assert!(v["choices"][0]["message"]["content"].is_null());
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn quirks_mode_sends_empty_finish_reason_no_usage_and_extra_fields() {
    let server = ScriptedServer::builder()
        .quirks(true)
        .start(Script::new([Reply::text("quirky text").usage(1, 2)]))
        .await
        .unwrap();
    let sse = stream(server.base_url(), &chat_body(true, true)).await;
    assert!(sse.done);
    let (last, rest) = sse.chunks.split_last().unwrap();
    assert!(rest.iter().all(|c| c["choices"][0]["finish_reason"] == ""));
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(sse.chunks.iter().all(|c| c.get("usage").is_none()));
    assert!(
        sse.chunks
            .iter()
            .all(|c| c.get("x_scripted_quirk").is_some())
    );
    assert_eq!(joined(&sse.chunks, "content"), "quirky text");
}

#[tokio::test]
async fn chunk_delay_paces_the_stream() {
    let server = ScriptedServer::builder()
        .chunk_delay(std::time::Duration::from_millis(20))
        .start(Script::new([Reply::text("12345678")]))
        .await
        .unwrap();
    let start = std::time::Instant::now();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    // 2 content pieces + finish + [DONE] = 3 delays after the first frame.
    assert!(start.elapsed() >= std::time::Duration::from_millis(60));
    assert!(sse.done);
    assert_eq!(joined(&sse.chunks, "content"), "12345678");
}
