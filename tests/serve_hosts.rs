//! DNS rebinding against a real `treadle serve` (loopback, no token): a page whose name
//! resolves to the server sends `Host`, `Origin` and `Sec-Fetch-Site: same-origin` that all
//! agree. Listing runs, starting one, approving a gate, the page and `/metrics` are each
//! refused (421) and change nothing; the same requests under a name given with
//! `--allowed-host` are answered.

use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const GATED: &str = "jobs:\n  - name: ship\n    plan:\n      - approval: deploy\n        message: Ship it?\n      - task: deploy-now\n        run: echo deploying\n";

/// A request as the rebinding page's browser sends it, from `name` to the server.
fn rebound(req: reqwest::RequestBuilder, s: &Server, name: &str) -> reqwest::RequestBuilder {
    let port = s.base.rsplit(':').next().expect("port");
    req.header("Host", format!("{name}:{port}"))
        .header("Origin", format!("http://{name}:{port}"))
        .header("Sec-Fetch-Site", "same-origin")
}

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn until_pending(s: &Server) -> Value {
    let started = Instant::now();
    loop {
        let (_, list) = get(s, "/api/v1/approvals?state=pending").await;
        if let Some(first) = list.as_array().and_then(|l| l.first()) {
            return first.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never pending");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebound_name_reads_starts_and_approves_nothing() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &[], &[]);
    let c = s.http();
    // A run waiting at its gate, started by the owner through the loopback address.
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let gate = until_pending(&s).await;
    let approve = format!("/api/v1/runs/{id}/approvals/{}", gate["seq"]);

    let evil = "rebind.evil.example";
    let (code, body) = send(rebound(c.get(s.url("/api/v1/runs")), &s, evil)).await;
    assert_eq!(code, 421, "{body}");
    let message = body["error"].as_str().expect("error");
    assert!(message.contains(evil), "{message}");
    assert!(message.contains("--allowed-host"), "{message}");
    assert!(!body.to_string().contains("deploy"), "{body}");
    let (code, _) = send(
        rebound(c.post(s.url("/api/v1/runs")), &s, evil).json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 421);
    let (code, _) = send(
        rebound(c.post(s.url(&approve)), &s, evil)
            .json(&json!({"decision": "approve", "by": "web"})),
    )
    .await;
    assert_eq!(code, 421);
    for path in [
        "/",
        "/metrics",
        "/assets/app.js",
        "/api/v1/health",
        "/nowhere",
    ] {
        let (code, _) = send(rebound(c.get(s.url(path)), &s, evil)).await;
        assert_eq!(code, 421, "{path}");
    }
    // An absolute request target naming another host is refused too, whatever Host says.
    let raw = raw_request(
        &s,
        "GET http://rebind.evil.example/api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.starts_with("HTTP/1.1 421"), "{raw}");

    // Nothing changed: one run, still waiting at its gate.
    let (_, runs) = get(&s, "/api/v1/runs").await;
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    let still = until_pending(&s).await;
    assert_eq!(still["seq"], gate["seq"]);
    // Loopback names still answer.
    for host in ["localhost", "127.0.0.1", "LocalHost"] {
        let port = s.base.rsplit(':').next().expect("port");
        let r = c
            .get(s.url("/api/v1/runs"))
            .header("Host", format!("{host}:{port}"))
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status().as_u16(), 200, "{host}");
    }
}

/// Sends `request` as raw bytes and returns what the server answers.
fn raw_request(s: &Server, request: &str) -> String {
    use std::io::{Read, Write};
    let addr = s.base.trim_start_matches("http://");
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    tcp.write_all(request.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_given_with_allowed_host_is_answered() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &["--allowed-host", "Treadle.Example.com"], &[]);
    let c = s.http();
    let name = "treadle.example.com";
    let (code, list) = send(rebound(c.get(s.url("/api/v1/runs")), &s, name)).await;
    assert_eq!((code, list), (200, json!([])));
    let (code, started) = send(
        rebound(c.post(s.url("/api/v1/runs")), &s, name).json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let gate = until_pending(&s).await;
    let approve = format!("/api/v1/runs/{id}/approvals/{}", gate["seq"]);
    let (code, decided) = send(
        rebound(c.post(s.url(&approve)), &s, name)
            .json(&json!({"decision": "approve", "by": "web"})),
    )
    .await;
    assert_eq!(code, 200, "{decided}");
    assert_eq!(decided["status"], "approved");
    let page = rebound(c.get(s.url("/")), &s, name)
        .send()
        .await
        .expect("page");
    assert_eq!(page.status().as_u16(), 200);
    // Another name is still refused by this server.
    let (code, _) = send(rebound(c.get(s.url("/api/v1/runs")), &s, "evil.example")).await;
    assert_eq!(code, 421);
}

#[test]
fn an_allowed_host_that_is_not_a_name_is_refused_at_start() {
    let f = Fixture::new(GATED);
    let out = f.treadle(&["serve", "--allowed-host", "http://evil.example:80"]);
    out.expect_code(2);
    assert!(out.stderr().contains("not a host name"), "{}", out.stderr());
}
