//! Failure replies: HTTP errors, malformed data, cut and blocked streams, exhaustion.

mod common;

use std::time::Duration;

use common::*;
use treadle_scripted::{Reply, Script, ScriptedServer};

#[tokio::test]
async fn status_reply_with_body_and_retry_after() {
    let server = ScriptedServer::start(Script::new([
        Reply::status(500).body("boom"),
        Reply::status(429).retry_after(7),
        Reply::text("ok"),
    ]))
    .await
    .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("retry-after").is_none());
    assert_eq!(resp.text().await.unwrap(), "boom");

    let resp = post(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let err: serde_json::Value = resp.json().await.unwrap();
    assert!(err["error"]["message"].is_string());

    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "content"), "ok");
}

#[tokio::test]
async fn malformed_reply_sends_a_data_line_that_is_not_json() {
    let server = ScriptedServer::start(Script::new([Reply::malformed(), Reply::malformed()]))
        .await
        .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(resp.status(), 200);
    let lines = data_lines(&resp.text().await.unwrap());
    assert!(serde_json::from_str::<serde_json::Value>(&lines[0]).is_ok());
    assert!(
        lines
            .iter()
            .any(|l| l != "[DONE]" && serde_json::from_str::<serde_json::Value>(l).is_err()),
        "one data line is not JSON: {lines:?}"
    );

    let resp = post(server.base_url(), &chat_body(false, false)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.json::<serde_json::Value>().await.is_err());
}

#[tokio::test]
async fn cut_stream_ends_without_done() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("partial answer that goes on").cut_after(2),
        Reply::text("a complete answer that is not cut").cut_after(2),
    ]))
    .await
    .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(resp.status(), 200);
    let (text, failed) = read_until_error(resp).await;
    assert!(
        failed,
        "the connection drops instead of ending the body cleanly"
    );
    let sse = parse_sse(&text);
    assert!(!sse.done);
    assert_eq!(sse.chunks.len(), 2);
    assert_eq!(joined(&sse.chunks, "content"), "partial ");

    // Non-streaming: a truncated body, then the connection drops.
    let resp = post(server.base_url(), &chat_body(false, false)).await;
    let (text, failed) = read_until_error(resp).await;
    assert!(failed);
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_err());
    assert_eq!(server.disconnects(), 0, "a cut is not a client disconnect");
}

#[tokio::test]
async fn blocked_stream_notices_client_disconnect() {
    let server = ScriptedServer::start(Script::new([Reply::text("x and more").block_after(1)]))
        .await
        .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    let mut body = resp.bytes_stream();
    let first = futures::StreamExt::next(&mut body).await.unwrap().unwrap();
    let sse = parse_sse(std::str::from_utf8(&first).unwrap());
    assert_eq!(sse.chunks.len(), 1);
    // Nothing more arrives while the stream is blocked.
    let more = tokio::time::timeout(
        Duration::from_millis(200),
        futures::StreamExt::next(&mut body),
    )
    .await;
    assert!(more.is_err(), "blocked stream sent more: {more:?}");
    assert_eq!(server.disconnects(), 0);
    assert!(!server.wait_client_gone(Duration::from_millis(50)).await);
    drop(body);
    assert!(
        server.wait_client_gone(Duration::from_secs(5)).await,
        "server saw the client go away"
    );
    assert_eq!(server.disconnects(), 1);
}

#[tokio::test]
async fn paced_stream_dropped_midway_counts_as_disconnect() {
    let server = ScriptedServer::builder()
        .chunk_delay(Duration::from_millis(50))
        .start(Script::new([Reply::text(
            "a fairly long answer that takes a while",
        )]))
        .await
        .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    let mut body = resp.bytes_stream();
    futures::StreamExt::next(&mut body).await.unwrap().unwrap();
    drop(body);
    assert!(server.wait_disconnects(1, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn exhausted_script_answers_500() {
    let server = ScriptedServer::start(Script::new([Reply::text("only one")]))
        .await
        .unwrap();
    let _ = stream(server.base_url(), &chat_body(true, false)).await;
    for _ in 0..2 {
        let resp = post(server.base_url(), &chat_body(true, false)).await;
        assert_eq!(resp.status(), 500);
        assert_eq!(
            resp.text().await.unwrap(),
            "scripted server: script exhausted after 1 requests"
        );
    }
    assert_eq!(server.request_count(), 3);
    // Pushing more replies revives it.
    server.push(Reply::text("again"));
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "content"), "again");
}

#[tokio::test]
async fn invalid_json_body_is_a_400_and_consumes_nothing() {
    let server = ScriptedServer::start(Script::new([Reply::text("kept")]))
        .await
        .unwrap();
    let resp = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(server.remaining(), 1);
    assert_eq!(server.requests()[0].body, serde_json::json!("{not json"));
}

#[tokio::test]
async fn dropping_the_server_ends_a_blocked_stream() {
    let server = ScriptedServer::start(Script::new([Reply::text("x").block_after(1)]))
        .await
        .unwrap();
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    drop(server);
    let read = tokio::time::timeout(Duration::from_secs(5), read_until_error(resp)).await;
    let (text, failed) = read.expect("the blocked stream ends when the server is dropped");
    assert!(failed);
    assert!(!parse_sse(&text).done);
}
