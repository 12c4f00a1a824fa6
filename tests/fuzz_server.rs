//! Fuzzing the HTTP surface of a real `treadle serve` with proptest: random methods, paths
//! (route segments, traversal, escapes), headers and bodies, sent as raw bytes over TCP.
//! Whatever arrives, the server answers with a status line (no panic, no hang), never a
//! 5xx other than 503, never shows a file from outside its project, writes nothing outside
//! it, and is still running at the end. `scripts/fuzz` runs it with more cases.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use common::server::Server;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const PIPELINE: &str =
    "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo ((who))\n";
const SECRET: &str = "OUTSIDE-THE-PROJECT-7f3a";

const SEGMENTS: &[&str] = &[
    "api",
    "v1",
    "runs",
    "1",
    "2",
    "0",
    "999999999999999999999",
    "-1",
    "events",
    "cancel",
    "approvals",
    "steps",
    "receipt",
    "pipelines",
    "treadle",
    "plan",
    "health",
    "metrics",
    "assets",
    "app.js",
    "p",
    "..",
    "%2e%2e",
    "%2F",
    "..%2f..%2foutside",
    "outside",
    "secret.txt",
    "",
    "%00",
    "~",
    "%ff",
    "hooks",
    "check",
    "a b",
    "?",
    "#",
];

fn path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(SEGMENTS), 0..7),
        prop::option::of("[a-z=&%0-9.]{0,20}"),
    )
        .prop_map(|(segs, query)| {
            let mut p = format!("/{}", segs.join("/"));
            if let Some(q) = query {
                p.push('?');
                p.push_str(&q);
            }
            p
        })
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(&["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"][..])
            .prop_map(str::to_owned),
        "[A-Z]{1,8}",
    ]
}

fn header() -> impl Strategy<Value = String> {
    let names = prop::sample::select(
        &[
            "Origin",
            "Last-Event-ID",
            "Content-Type",
            "Authorization",
            "Sec-Fetch-Site",
            "Accept",
            "X-Anything",
            "Range",
            "Transfer-Encoding",
            "Expect",
        ][..],
    );
    (names, "[ -~]{0,40}").prop_map(|(n, v)| format!("{n}: {v}"))
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        (
            prop::sample::select(&["treadle", "nope", "", "../treadle"][..]),
            "[ -~]{0,30}",
            prop::sample::select(&["approve", "reject", "maybe"][..]),
        )
            .prop_map(|(p, who, d)| {
                serde_json::json!({"pipeline": p, "vars": {"who": who}, "decision": d, "by": "fuzz"})
                    .to_string()
                    .into_bytes()
            }),
    ]
}

/// Sends one request; the status of the answer (`None`: no status line came back).
fn send(addr: &str, request: &[u8]) -> (Option<u16>, String) {
    let Ok(mut tcp) = TcpStream::connect(addr) else {
        return (None, String::new());
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(15)));
    let _ = tcp.write_all(request);
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok());
    (status, text)
}

/// Every file under `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.push((
                p.display().to_string(),
                std::fs::read(&p).unwrap_or_default(),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn random_requests_get_no_5xx_and_touch_nothing_outside_the_project() {
    let root = tempfile::tempdir().expect("temp dir");
    let project = root.path().join("project");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(project.join("treadle.yml"), PIPELINE).expect("pipeline");
    std::fs::write(outside.join("secret.txt"), SECRET).expect("secret");
    let before = snapshot(&outside);
    let mut s = Server::start(&project, &[], &[]);
    let addr = s.base.trim_start_matches("http://").to_owned();
    let strategy = (
        method(),
        path(),
        prop::collection::vec(header(), 0..4),
        body(),
        prop::sample::select(&["127.0.0.1", "localhost", "evil.example", "", "[::1]"][..]),
    );
    let mut runner = TestRunner::new(Config {
        cases: Config::default().cases.min(256),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |(method, path, headers, body, host)| {
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        for h in &headers {
            request.push_str(h);
            request.push_str("\r\n");
        }
        request.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        ));
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(&body);
        let (status, text) = send(&addr, &bytes);
        let shown = || String::from_utf8_lossy(&bytes).into_owned();
        let status = status
            .ok_or_else(|| TestCaseError::fail(format!("no answer to {:?}: {text:?}", shown())))?;
        prop_assert!(
            status < 500 || status == 503,
            "{status} for {:?}: {text}",
            shown()
        );
        prop_assert!(
            !text.contains(SECRET),
            "a file outside leaked: {:?}",
            shown()
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        s.child.try_wait().expect("wait").is_none(),
        "the server died"
    );
    assert_eq!(snapshot(&outside), before, "something was written outside");
    let mut top: Vec<String> = std::fs::read_dir(root.path())
        .expect("root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["outside", "project"]);
}
