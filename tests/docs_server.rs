//! Every example request in docs/server.md (each ```http block) is sent, in order, to a live
//! `treadle serve` serving the page's own example pipeline, and must answer the status the
//! block names (`# 201` on its first line; 200 when it names none). A request expecting
//! success is retried for a while, since some wait for the run to get somewhere (an
//! approval to be asked); one expecting an error must answer it at once.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::server::Server;

/// One example request.
struct Example {
    line: usize,
    status: u16,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// `(first yaml block, http blocks)` of the page.
fn page() -> (String, Vec<Example>) {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/server.md"))
            .expect("docs/server.md");
    let mut yaml = None;
    let mut examples = Vec::new();
    let mut block: Option<(String, usize, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut block {
            None if line.starts_with("```") && line.len() > 3 => {
                block = Some((line[3..].to_owned(), n + 1, Vec::new()))
            }
            Some((lang, start, lines)) if line.starts_with("```") => {
                match lang.as_str() {
                    "yaml" if yaml.is_none() => yaml = Some(lines.join("\n")),
                    "http" => examples.push(parse(*start, lines)),
                    _ => {}
                }
                block = None;
            }
            Some((_, _, lines)) => lines.push(line),
            None => {}
        }
    }
    (yaml.expect("a yaml block"), examples)
}

fn parse(line: usize, lines: &[&str]) -> Example {
    let mut rest = lines.iter().copied();
    let mut first = rest.next().expect("request line");
    let mut status = 200;
    if let Some(code) = first.strip_prefix("# ") {
        status = code.trim().parse().expect("status");
        first = rest.next().expect("request line");
    }
    let (method, path) = first.split_once(' ').expect("METHOD PATH");
    let mut headers = Vec::new();
    for l in rest.by_ref() {
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(": ").expect("header");
        headers.push((k.to_owned(), v.to_owned()));
    }
    Example {
        line,
        status,
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body: rest.collect::<Vec<_>>().join("\n"),
    }
}

async fn send(s: &Server, e: &Example) -> (u16, String) {
    let client = s.http();
    let mut req = client.request(e.method.parse().expect("method"), s.url(&e.path));
    for (k, v) in &e.headers {
        req = req.header(k, v);
    }
    if !e.body.is_empty() {
        req = req.body(e.body.clone());
    }
    let r = req.send().await.expect("send");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_request_in_the_server_doc_answers_as_documented() {
    let (yaml, examples) = page();
    assert!(examples.len() >= 10, "only {} examples", examples.len());
    let dir = tempfile::tempdir().expect("temp dir");
    // Served, the approval waits for the documented answer, not for its short deadline.
    let yaml = yaml.replace("timeout: 2s", "timeout: 10m");
    std::fs::write(dir.path().join("release.yml"), yaml).expect("write");
    let s = Server::start(dir.path(), &["."], &[]);
    for e in &examples {
        let started = Instant::now();
        loop {
            let (status, body) = send(&s, e).await;
            if status == e.status {
                if e.path.ends_with("/events") && status == 200 {
                    assert!(
                        body.contains("event: run_finished"),
                        "docs/server.md:{}: {body}",
                        e.line
                    );
                    assert!(
                        body.contains("event: end"),
                        "docs/server.md:{}: {body}",
                        e.line
                    );
                }
                break;
            }
            let retry = e.status < 300 && started.elapsed() < Duration::from_secs(20);
            assert!(
                retry,
                "docs/server.md:{}: {} {} answered {status}, not {}: {body}",
                e.line, e.method, e.path, e.status
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
