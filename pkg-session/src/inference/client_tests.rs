//! Tests of the model client against the scripted OpenAI-compatible server (real HTTP and
//! SSE on loopback) and a few raw responders. In the crate because the client is not public:
//! sessions are the way in.

use std::time::{Duration, Instant};

use super::{
    ApiKey, Completion, InferenceError, InferenceRequest, ModelClient, ModelConfig,
    PreparedRequest, RetryPolicy, ToolChoice, ToolSpec,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use treadle_event::{Block, DeltaKind, Message, Role};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

type Deltas = Vec<(DeltaKind, Option<u32>, String)>;

fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_secs(10),
    }
}

fn client(base_url: &str) -> ModelClient {
    let config = ModelConfig::new(base_url, "scripted-model").with_retry(fast_retry(3));
    ModelClient::new(config).unwrap_or_else(|e| panic!("client: {e}"))
}

fn ask(text: &str) -> InferenceRequest {
    InferenceRequest {
        system: Some("be brief".into()),
        messages: vec![Message::user(text)],
        ..Default::default()
    }
}

async fn start(replies: impl IntoIterator<Item = Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::new(replies))
        .await
        .unwrap_or_else(|e| panic!("server: {e}"))
}

async fn run(
    client: &ModelClient,
    request: &InferenceRequest,
) -> (Result<Completion, InferenceError>, Deltas) {
    let mut deltas = Vec::new();
    let request = PreparedRequest::new(request.clone());
    let result = client
        .complete(&request, |kind, index, piece| {
            deltas.push((kind, index, piece.to_owned()))
        })
        .await;
    (result, deltas)
}

fn ok(result: Result<Completion, InferenceError>) -> Completion {
    result.unwrap_or_else(|e| panic!("completion failed: {e}"))
}

fn err(result: Result<Completion, InferenceError>) -> InferenceError {
    match result {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn text_streams_deltas_in_order_with_usage() {
    let server = start([Reply::text("Hello there, my friend")
        .usage(10, 5)
        .cached_tokens(3)])
    .await;
    let client = client(server.base_url());
    let (result, deltas) = run(&client, &ask("hi")).await;
    let completion = ok(result);

    assert!(deltas.len() > 1, "text should arrive in pieces: {deltas:?}");
    assert!(
        deltas
            .iter()
            .all(|(k, i, t)| *k == DeltaKind::Text && i.is_none() && !t.is_empty())
    );
    let streamed: String = deltas.iter().map(|(_, _, t)| t.as_str()).collect();
    assert_eq!(streamed, "Hello there, my friend");

    assert_eq!(completion.message.role, Role::Assistant);
    assert_eq!(
        completion.message.content,
        [Block::Text {
            text: "Hello there, my friend".into()
        }]
    );
    assert_eq!(completion.finish_reason, "stop");
    let u = completion.usage;
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (10, 5, 3)
    );
    assert!(!completion.model.is_empty());
}

#[tokio::test]
async fn completion_runs_on_a_spawned_task() {
    let server = start([Reply::text("sent across threads")]).await;
    let client = client(server.base_url());
    // The turn task spawns inference; the future must be `Send`.
    let task = tokio::spawn(async move {
        let request = PreparedRequest::new(ask("hi"));
        client.complete(&request, |_, _, _| {}).await
    });
    let completion = ok(task.await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(completion.message.text_content(), "sent across threads");
}

#[tokio::test]
async fn parallel_tool_calls_are_stitched_by_index() {
    let server = start([Reply::tool_calls([
        ToolCall::new("echo", json!({"text": "a long argument to split"})),
        ToolCall::new("read", json!({"path": "src/lib.rs"})).id("call_read"),
    ])])
    .await;
    let client = client(server.base_url());
    let (result, deltas) = run(&client, &ask("go")).await;
    let completion = ok(result);

    let calls: Vec<_> = completion
        .message
        .tool_uses()
        .map(|u| (u.id, u.name, u.arguments))
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].1, calls[0].2),
        ("echo", r#"{"text":"a long argument to split"}"#)
    );
    assert_eq!(calls[1], ("call_read", "read", r#"{"path":"src/lib.rs"}"#));
    assert!(!calls[0].0.is_empty() && calls[0].0 != calls[1].0);
    assert_eq!(completion.finish_reason, "tool_calls");

    for (index, (_, _, arguments)) in calls.iter().enumerate() {
        let index = Some(index as u32);
        let streamed: String = deltas
            .iter()
            .filter(|(k, i, _)| *k == DeltaKind::ToolArguments && *i == index)
            .map(|(_, _, t)| t.as_str())
            .collect();
        assert_eq!(&streamed, arguments);
    }
}

#[tokio::test]
async fn quirky_server_is_tolerated() {
    let server = ScriptedServer::builder()
        .quirks(true)
        .start(Script::new([Reply::text("plain answer")
            .reasoning("thinking hard")
            .usage(7, 3)
            .with_tool_calls([ToolCall::new("ls", json!({}))])]))
        .await
        .unwrap_or_else(|e| panic!("server: {e}"));
    let client = client(server.base_url());
    let (result, deltas) = run(&client, &ask("hi")).await;
    let completion = ok(result);

    let content = &completion.message.content;
    assert_eq!(
        content[0],
        Block::Reasoning {
            text: "thinking hard".into()
        }
    );
    assert_eq!(
        content[1],
        Block::Text {
            text: "plain answer".into()
        }
    );
    assert!(
        matches!(&content[2], Block::ToolUse { name, arguments, .. } if name == "ls" && arguments == "{}")
    );
    assert_eq!(
        completion.usage,
        Default::default(),
        "quirky server sends no usage"
    );
    assert_eq!(completion.finish_reason, "tool_calls");
    let reasoning: String = deltas
        .iter()
        .filter(|(k, _, _)| *k == DeltaKind::Reasoning)
        .map(|(_, _, t)| t.as_str())
        .collect();
    assert_eq!(reasoning, "thinking hard");
}

#[tokio::test]
async fn server_error_then_success_is_retried() {
    let server = start([
        Reply::status(500),
        Reply::status(503),
        Reply::text("recovered"),
    ])
    .await;
    let client = client(server.base_url());
    let completion = ok(run(&client, &ask("hi")).await.0);
    assert_eq!(completion.message.text_content(), "recovered");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn server_errors_beyond_max_retries_report_status_and_endpoint() {
    let server = start([
        Reply::status(500).body("boom one"),
        Reply::status(500).body("boom two"),
        Reply::status(500).body("boom three"),
        Reply::text("never reached"),
    ])
    .await;
    let config = ModelConfig::new(server.base_url(), "m").with_retry(fast_retry(2));
    let client = ModelClient::new(config).unwrap_or_else(|e| panic!("{e}"));
    let error = err(run(&client, &ask("hi")).await.0);

    assert_eq!(error.status(), Some(500));
    assert!(error.is_retryable_before_first_byte());
    let text = error.to_string();
    assert!(text.contains(server.base_url()), "{text}");
    assert!(text.contains("HTTP 500 Internal Server Error"), "{text}");
    assert!(text.contains("boom three"), "{text}");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let server = start([
        Reply::status(429).retry_after(1),
        Reply::text("after the wait"),
    ])
    .await;
    let client = client(server.base_url());
    let started = Instant::now();
    let completion = ok(run(&client, &ask("hi")).await.0);
    let waited = started.elapsed();

    assert_eq!(completion.message.text_content(), "after the wait");
    assert_eq!(server.request_count(), 2);
    // The backoff alone would be ~5 ms; Retry-After asked for 1 s.
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

#[tokio::test]
async fn retry_after_is_capped_by_max_delay() {
    let server = start([Reply::status(429).retry_after(30), Reply::text("soon")]).await;
    let config = ModelConfig::new(server.base_url(), "m").with_retry(RetryPolicy {
        max_retries: 1,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(100),
    });
    let client = ModelClient::new(config).unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    ok(run(&client, &ask("hi")).await.0);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn unauthorized_is_not_retried() {
    let server = start([Reply::status(401), Reply::text("never reached")]).await;
    let client = client(server.base_url());
    let error = err(run(&client, &ask("hi")).await.0);

    assert_eq!(error.status(), Some(401));
    assert!(!error.is_retryable_before_first_byte());
    let text = error.to_string();
    assert!(text.contains("HTTP 401 Unauthorized"), "{text}");
    assert!(text.contains(server.base_url()), "{text}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn connection_refused_names_the_endpoint() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    drop(listener);
    let endpoint = format!("http://127.0.0.1:{port}/v1");
    let config = ModelConfig::new(&endpoint, "m").with_retry(fast_retry(2));
    let client = ModelClient::new(config).unwrap_or_else(|e| panic!("{e}"));
    let error = err(run(&client, &ask("hi")).await.0);

    assert!(matches!(error, InferenceError::Connect { .. }), "{error:?}");
    assert!(error.is_retryable_before_first_byte());
    assert_eq!(
        error.to_string(),
        format!("cannot reach {endpoint}: connection refused")
    );
}

#[tokio::test]
async fn malformed_chunk_is_an_error() {
    let server = start([Reply::malformed(), Reply::text("never reached")]).await;
    let client = client(server.base_url());
    let error = err(run(&client, &ask("hi")).await.0);

    assert!(
        matches!(error, InferenceError::Malformed { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains(server.base_url()) && text.contains("not valid JSON"),
        "{text}"
    );
    assert_eq!(server.request_count(), 1, "no retry once the body started");
}

#[tokio::test]
async fn cut_stream_is_an_error() {
    let server = start([
        Reply::text("a partial answer that is long").cut_after(2),
        Reply::text("no"),
    ])
    .await;
    let client = client(server.base_url());
    let (result, deltas) = run(&client, &ask("hi")).await;
    let error = err(result);

    assert!(
        matches!(error, InferenceError::StreamCut { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains(server.base_url()));
    assert!(
        !deltas.is_empty(),
        "pieces before the cut are still reported"
    );
    assert_eq!(server.request_count(), 1, "no retry once the body started");
}

#[tokio::test]
async fn dropping_the_call_closes_a_blocked_stream() {
    let server = start([Reply::text("first piece then nothing").block_after(2)]).await;
    let client = client(server.base_url());
    let request = ask("hi");
    let call = run(&client, &request);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    assert!(server.wait_client_gone(Duration::from_secs(5)).await);
}

#[tokio::test]
async fn request_body_and_bearer_key_are_sent() {
    let server = start([Reply::text("ok")]).await;
    let key = "sk-test-SECRET-123456";
    let config = ModelConfig::new(server.base_url(), "my-model")
        .with_api_key(ApiKey::new(key.into()))
        .with_temperature(0.2);
    let client = ModelClient::new(config).unwrap_or_else(|e| panic!("{e}"));
    let schema =
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    let request = InferenceRequest {
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Reads a file".into(),
            parameters: schema.clone(),
        }],
        tool_choice: Some(ToolChoice::Auto),
        ..ask("hi")
    };
    ok(run(&client, &request).await.0);

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    let body = &recorded[0].body;
    assert_eq!(body, &client.body(&PreparedRequest::new(request.clone())));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"]["include_usage"], json!(true));
    assert_eq!(body["model"], json!("my-model"));
    assert_eq!(body["temperature"], json!(0.2));
    assert_eq!(body["tool_choice"], json!("auto"));
    assert_eq!(body["tools"][0]["type"], json!("function"));
    assert_eq!(body["tools"][0]["function"]["name"], json!("read"));
    assert_eq!(body["tools"][0]["function"]["parameters"], schema);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(
        recorded[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}

#[tokio::test]
async fn no_key_sends_no_authorization_header() {
    let server = start([Reply::text("ok")]).await;
    let client = client(server.base_url());
    ok(run(&client, &ask("hi")).await.0);
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn api_key_never_appears_in_errors() {
    let key = "sk-test-SECRET-abcdef";
    let echo = format!(r#"{{"error": {{"message": "Incorrect API key provided: {key}"}}}}"#);
    let server = start([Reply::status(401).body(echo)]).await;
    let config = ModelConfig::new(server.base_url(), "m").with_api_key(ApiKey::new(key.into()));
    let client = ModelClient::new(config.clone()).unwrap_or_else(|e| panic!("{e}"));
    let error = err(run(&client, &ask("hi")).await.0);

    let shown = format!("{error} {error:?} {client:?} {config:?}");
    assert!(!shown.contains(key), "{shown}");
    assert!(shown.contains("Incorrect API key provided: ***"), "{shown}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}

/// Serves one HTTP response with `sse` as its body, then closes.
async fn raw_sse_server(sse: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        if let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            // The request is small and arrives at once on loopback; its content is unused.
            let _ = socket.read(&mut buf).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                sse.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(sse.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn clean_end_without_finish_reason_is_a_cut() {
    let endpoint = raw_sse_server(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half\"},\"finish_reason\":\"\"}]}\n\ndata: [DONE]\n\n",
    )
    .await;
    let error = err(run(&client(&endpoint), &ask("hi")).await.0);
    assert!(
        matches!(error, InferenceError::StreamCut { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains(&endpoint));
}

#[tokio::test]
async fn crlf_lines_keepalives_comments_and_joined_data_are_decoded() {
    let endpoint = raw_sse_server(
        ": hello\r\n\r\nevent: keepalive\r\ndata: {}\r\n\r\n\
         data: {\"model\":\"served\",\"choices\":[{\"index\":0,\r\n\
         data: \"delta\":{\"content\":\"two\\nlines \\u00e9\"}}]}\r\n\r\n\
         data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" plain\"},\"finish_reason\":\"stop\"}]}\r\n\r\n\
         data: [DONE]\r\n\r\n",
    )
    .await;
    let (result, deltas) = run(&client(&endpoint), &ask("hi")).await;
    let completion = ok(result);
    assert_eq!(completion.message.text_content(), "two\nlines é plain");
    assert_eq!(completion.model, "served");
    assert_eq!(completion.finish_reason, "stop");
    assert_eq!(deltas.len(), 2, "{deltas:?}");
}

#[tokio::test]
async fn error_object_in_stream_is_reported() {
    let endpoint = raw_sse_server(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n\
         data: {\"error\":{\"message\":\"upstream overloaded\",\"code\":502}}\n\n",
    )
    .await;
    let error = err(run(&client(&endpoint), &ask("hi")).await.0);
    assert!(matches!(error, InferenceError::Remote { .. }), "{error:?}");
    assert!(error.to_string().contains("upstream overloaded"));
}

/// An https endpoint is spoken to in TLS: the first byte the server reads opens a TLS
/// handshake record (0x16), not a plain HTTP request. The server reports the byte before it
/// closes the connection, so it is known by the time the call fails; a client without TLS
/// fails without connecting, and nothing is reported.
#[tokio::test]
async fn an_https_endpoint_is_spoken_to_in_tls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (report, mut first_byte) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        if let Ok((mut socket, _)) = listener.accept().await {
            let mut byte = [0u8; 1];
            if socket.read_exact(&mut byte).await.is_ok() {
                let _ = report.send(byte[0]);
            }
        }
    });
    let config =
        ModelConfig::new(format!("https://{addr}/v1"), "m").with_retry(RetryPolicy::none());
    let client = ModelClient::new(config).unwrap_or_else(|e| panic!("{e}"));
    let error = err(run(&client, &ask("hi")).await.0);
    server.abort();
    assert_eq!(first_byte.try_recv().ok(), Some(0x16), "{error}");
}

#[tokio::test]
async fn invalid_endpoint_and_key_are_refused_up_front() {
    assert!(ModelClient::new(ModelConfig::new("ftp://x/v1", "m")).is_err());
    assert!(ModelClient::new(ModelConfig::new("not a url", "m")).is_err());
    let bad_key = ModelConfig::new("http://127.0.0.1:1/v1", "m")
        .with_api_key(ApiKey::new("a\nb-secret".into()));
    let error = ModelClient::new(bad_key)
        .map(|_| ())
        .err()
        .map(|e| e.to_string());
    assert!(error.is_some_and(|e| !e.contains("b-secret")));
}
