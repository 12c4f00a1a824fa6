//! Scripts and bookkeeping: echo workload, from_fn, push, request log, jitter, the binary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Drives the echo workload like an agent loop would, streaming or not.
async fn run_echo(server: &ScriptedServer, stream_mode: bool) -> (Vec<Value>, String) {
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    let mut args_seen = Vec::new();
    for _ in 0..10 {
        let body = json!({"model": "m", "messages": messages, "stream": stream_mode,
                          "stream_options": {"include_usage": true}});
        let (calls, text) = if stream_mode {
            let sse = stream(server.base_url(), &body).await;
            assert!(
                sse.chunks.iter().any(|c| c["usage"].is_object()),
                "echo replies carry usage"
            );
            (stitched_calls(&sse.chunks), joined(&sse.chunks, "content"))
        } else {
            let v: Value = post(server.base_url(), &body).await.json().await.unwrap();
            assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
            let msg = &v["choices"][0]["message"];
            let calls = msg["tool_calls"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            (
                                c["id"].as_str().unwrap().to_owned(),
                                c["function"]["name"].as_str().unwrap().to_owned(),
                                c["function"]["arguments"].as_str().unwrap().to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (calls, msg["content"].as_str().unwrap_or("").to_owned())
        };
        if calls.is_empty() {
            return (args_seen, text);
        }
        assert_eq!(calls.len(), 1);
        let (id, name, args) = &calls[0];
        assert_eq!(name, "echo");
        args_seen.push(serde_json::from_str(args).unwrap());
        messages.push(json!({"role": "assistant", "tool_calls": [
            {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": args}));
    }
    panic!("echo workload did not finish");
}

#[tokio::test]
async fn echo_until_gives_k_tool_calls_then_done() {
    for (record, stream_mode) in [(true, true), (false, true), (false, false)] {
        let server = ScriptedServer::builder()
            .record(record)
            .start(Script::echo_until(3))
            .await
            .unwrap();
        let (args, text) = run_echo(&server, stream_mode).await;
        assert_eq!(
            args,
            vec![json!({"i": 0}), json!({"i": 1}), json!({"i": 2})]
        );
        assert_eq!(text, "done");
        assert_eq!(server.request_count(), 4);
        assert_eq!(server.requests().len(), if record { 4 } else { 0 });
    }
}

#[tokio::test]
async fn requests_are_recorded_in_order_with_headers() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("a"),
        Reply::text("b"),
        Reply::text("c"),
    ]))
    .await
    .unwrap();
    for i in 0..3 {
        let mut body = chat_body(i % 2 == 0, false);
        body["n"] = json!(i);
        let _ = post(server.base_url(), &body).await.text().await.unwrap();
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(server.request_count(), 3);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.body["n"], i);
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("Authorization"), Some("Bearer test-key"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    // The path without /v1 works too.
    server.push(Reply::text("d"));
    let url = server.base_url().trim_end_matches("/v1").to_owned();
    let resp = post(&url, &chat_body(false, false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(server.requests()[3].path, "/chat/completions");
}

#[tokio::test]
async fn from_fn_answers_from_the_request_body() {
    let server = ScriptedServer::start(Script::from_fn(|req: &Value| {
        let n = req["messages"].as_array().map_or(0, Vec::len);
        Reply::text(format!("{n} messages"))
    }))
    .await
    .unwrap();
    server.push(Reply::text("pushed first"));
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "content"), "pushed first");
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "content"), "1 messages");
}

#[tokio::test]
async fn jitter_still_delivers_complete_streams_under_concurrency() {
    let server = ScriptedServer::builder()
        .jitter(Duration::ZERO, Duration::from_millis(3), 7)
        .start(Script::from_fn(|req: &Value| {
            Reply::text(req["tag"].as_str().unwrap_or("?").repeat(5))
        }))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let url = server.base_url().to_owned();
            tokio::spawn(async move {
                let mut body = chat_body(true, false);
                body["tag"] = json!(format!("t{i}"));
                let sse = stream(&url, &body).await;
                assert!(sse.done);
                assert_eq!(joined(&sse.chunks, "content"), format!("t{i}").repeat(5));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(server.wait_requests(8, Duration::from_secs(1)).await);
}

#[tokio::test]
async fn script_from_json_file_format() {
    let script = Script::from_json(
        r#"[{"text": "hi", "reasoning": "hmm", "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
            {"tool_calls": [{"name": "echo", "arguments": {"i": 1}, "id": "c1"},
                            {"name": "raw", "arguments": "{broken"}]},
            {"status": 503, "retry_after": 2},
            {"malformed": true, "cut_after": 1}]"#,
    )
    .unwrap();
    assert_eq!(script.len(), 4);
    let server = ScriptedServer::start(script).await.unwrap();
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(joined(&sse.chunks, "content"), "hi");
    let sse = stream(server.base_url(), &chat_body(true, false)).await;
    let calls = stitched_calls(&sse.chunks);
    assert_eq!(calls[0].0, "c1");
    assert_eq!(calls[1].2, "{broken");
    let resp = post(server.base_url(), &chat_body(true, false)).await;
    assert_eq!(resp.status(), 503);

    assert!(Script::from_json("[{}]").is_err());
    assert!(Script::from_json(r#"[{"text": "a", "status": 500}]"#).is_err());
    assert!(Script::from_json(r#"[{"text": "a", "bogus": 1}]"#).is_err());
}

#[tokio::test]
async fn binary_serves_echo_workload_and_prints_base_url() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle-scripted"))
        .args(["--echo-until", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let base = line.trim().to_owned();
    assert!(
        base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"),
        "{base}"
    );
    let sse = stream(&base, &chat_body(true, false)).await;
    let calls = stitched_calls(&sse.chunks);
    assert_eq!(calls[0].1, "echo");
    assert_eq!(calls[0].0, "call_0");
    child.kill().unwrap();
    child.wait().unwrap();
}
