//! Resource types written as expressions (`config.expr:`), through the `treadle` binary,
//! against a real HTTP server on loopback: a batched `http()` check with shared headers,
//! a retry honouring `Retry-After`, `env()` limited to the type's `env:`, `check_file:`, an
//! `in` that writes files, an `out` that reads its inputs with `file()` and posts JSON, and
//! each bad input (an env name not listed, a refused `fail()`, a request with no response,
//! `tolerate_errors`, `max_response_bytes`, a per-call timeout, a parse error, an unknown
//! name on line 2 (its place given), a path out
//! of the artifact) giving an error that names the resource.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

use common::Fixture;

/// What the server saw: each request's path and query, and each body posted.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

async fn releases(
    State(seen): State<Seen>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    let page = q.get("page").cloned().unwrap_or_default();
    seen.push(format!("releases page={page}"));
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some("Bearer s3cret") {
        return (
            StatusCode::UNAUTHORIZED,
            HeaderMap::new(),
            Json(json!({"error": "who?"})),
        );
    }
    // Page 2 is rate-limited the first time it is asked for.
    let asked = seen
        .all()
        .iter()
        .filter(|s| *s == "releases page=2")
        .count();
    if page == "2" && asked == 1 {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "0".parse().unwrap());
        return (StatusCode::TOO_MANY_REQUESTS, h, Json(json!({})));
    }
    let items = match page.as_str() {
        "1" => json!([{"n": "2", "tag": "v2"}, {"n": "1", "tag": "v1"}]),
        "2" => json!([{"n": "10", "tag": "v10"}]),
        _ => json!([]),
    };
    (
        StatusCode::OK,
        HeaderMap::new(),
        Json(json!({ "items": items })),
    )
}

async fn publish(State(seen): State<Seen>, Json(body): Json<Value>) -> Json<Value> {
    seen.push(format!("publish {body}"));
    if body["text"] == "hello" {
        Json(json!({"ok": true, "id": "42"}))
    } else {
        Json(json!({"ok": false, "error": "not_in_channel"}))
    }
}

/// Starts the server; its base URL and what it sees.
async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/releases", get(releases))
        .route("/publish", post(publish))
        .route("/big", get(|| async { "x".repeat(5000) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// Runs `treadle ARGS` on a blocking thread, so that the server keeps answering.
async fn treadle(f: Fixture, args: &'static [&'static str]) -> (Fixture, common::Run) {
    tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(args, &[("RELEASES_TOKEN", "s3cret")]);
        (f, run)
    })
    .await
    .unwrap()
}

fn all(r: &common::Run) -> String {
    format!("{}\n{}", r.stdout(), r.stderr())
}

const CHECK: &str = r#"// Every page at once, in one batched call, with the token as a shared header.
let auth = {Authorization: "Bearer " + env("RELEASES_TOKEN")};
let pages = http(1..source.pages | map(({url: source.url + "/releases", query: {page: string(#)}})),
                 {headers: auth, concurrency: 2, retry: {on: [429], max: 2}});
pages
  | map(#.json.items)
  | flatten()
  | sortBy(int(#.n))
  | map(({tag: #.tag}))
"#;

fn pipeline(url: &str, in_: &str, out: &str, plan: &str) -> String {
    format!(
        r#"
resource_types:
  - name: releases
    env: [RELEASES_TOKEN]
    config:
      expr:
        check_file: types/releases.expr
        in: |
{in_}
        out: |
{out}
resources:
  - name: rel
    type: releases
    source: {{ url: "{url}", pages: 2 }}
jobs:
  - name: build
    plan:
{plan}
"#
    )
}

const IN: &str =
    r#"          {"tag.txt": version.tag + "\n", "notes/about.txt": "release " + version.tag}"#;
const OUT: &str = r#"          let posted = http({url: source.url + "/publish", json: {text: trim(file("msg/text.txt"))}}).json;
          posted.ok ? {tag: "v" + posted.id} : fail("publish refused: " + posted.error)"#;
const SHOW: &str = r#"      - get: rel
      - task: show
        inputs: [rel]
        run: cat rel/tag.txt rel/notes/about.txt"#;

fn fixture(yaml: &str) -> Fixture {
    let f = Fixture::new(yaml);
    std::fs::create_dir_all(f.path().join("types")).unwrap();
    std::fs::write(f.path().join("types/releases.expr"), CHECK).unwrap();
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_check_pages_retries_and_a_get_writes_the_files_in_returns() {
    let (url, seen) = server().await;
    let f = fixture(&pipeline(&url, IN, OUT, SHOW));
    let (_f, r) = treadle(f, &["run"]).await;
    r.expect_code(0);
    let out = r.stdout();
    // Sorted by number, not text: v10 is the newest.
    assert!(
        out.contains("│ v10\n") && out.contains("│ release v10"),
        "{}",
        all(&r)
    );
    let asked: Vec<String> = seen.all();
    assert_eq!(
        asked.iter().filter(|s| *s == "releases page=2").count(),
        2,
        "page 2 was retried once after its 429: {asked:?}"
    );
    assert_eq!(asked.iter().filter(|s| *s == "releases page=1").count(), 1);
    assert!(
        !all(&r).contains("s3cret"),
        "the token never shows: {}",
        all(&r)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_reads_its_inputs_posts_json_and_a_refusal_fails_the_put() {
    let (url, seen) = server().await;
    let plan = |text: &str| {
        format!(
            r#"      - task: write
        outputs: [msg]
        run: echo {text} > msg/text.txt
      - put: rel
        inputs: [msg]"#
        )
    };
    let f = fixture(&pipeline(&url, IN, OUT, &plan("hello")));
    let (f, r) = treadle(f, &["run"]).await;
    r.expect_code(0);
    assert!(r.stdout().contains(r#"{"tag":"v42"}"#), "{}", all(&r));
    assert!(
        seen.all()
            .contains(&r#"publish {"text":"hello"}"#.to_owned()),
        "{:?}",
        seen.all()
    );

    std::fs::write(f.file(), pipeline(&url, IN, OUT, &plan("goodbye"))).unwrap();
    let (_f, r) = treadle(f, &["run"]).await;
    assert_ne!(r.code(), 0, "{}", all(&r));
    let text = all(&r);
    assert!(
        text.contains("resource `rel`") && text.contains("publish refused: not_in_channel"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_expressions_and_failed_requests_name_the_resource() {
    let (url, _seen) = server().await;
    let closed = common::dead_url();
    let cases: Vec<(String, String)> = vec![
        (
            r#"env("HOME")"#.to_owned(),
            r#"env("HOME"): not in this resource type's env:"#.to_owned(),
        ),
        (
            r#"fail("no versions today")"#.to_owned(),
            "no versions today".to_owned(),
        ),
        (
            format!(r#"http({{url: "{closed}/x"}})"#),
            format!("GET {closed}/x: cannot connect"),
        ),
        (
            format!(r#"http({{url: "{url}/big"}}, {{max_response_bytes: 100}})"#),
            "larger than max_response_bytes (100)".to_owned(),
        ),
        (
            format!(r#"http({{url: "{url}/slow"}}, {{timeout: "300ms"}})"#),
            "timed out".to_owned(),
        ),
        (
            format!(r#"http({{url: "{url}/big", header: {{}}}})"#),
            "unknown request key `header`".to_owned(),
        ),
        (
            "map([1], {a: #}".to_owned(),
            "does not parse: line 1".to_owned(),
        ),
        ("[1] + [2]".to_owned(), "concat(a, b)".to_owned()),
        // A failure while it runs names the line and column, and shows the text there.
        (
            "let n = source.pages;\nn + nothing".to_owned(),
            "line 2, column 5: unknown name `nothing`".to_owned(),
        ),
    ];
    for (check, says) in &cases {
        let yaml = pipeline(&url, IN, OUT, SHOW);
        let f = fixture(&yaml);
        std::fs::write(f.path().join("types/releases.expr"), check).unwrap();
        let (_f, r) = treadle(f, &["run"]).await;
        assert_ne!(r.code(), 0, "{check}: {}", all(&r));
        let text = all(&r);
        assert!(
            text.contains("resource `rel`") && text.contains(says.as_str()),
            "{check}: expected {says:?} in\n{text}"
        );
    }

    // Tolerated, the dead request is an envelope with status 0 and an error, and the
    // healthy one still counts.
    let tolerant = format!(
        r#"http([{{url: "{closed}/x"}}, {{url: "{url}/releases", query: {{page: "1"}}, headers: {{Authorization: "Bearer " + env("RELEASES_TOKEN")}}}}], {{tolerate_errors: true}})
  | filter(#.error == nil)
  | map(#.json.items)
  | flatten()
  | sortBy(int(#.n))
  | map(({{tag: #.tag}}))"#
    );
    let f = fixture(&pipeline(&url, IN, OUT, SHOW));
    std::fs::write(f.path().join("types/releases.expr"), tolerant).unwrap();
    let (_f, r) = treadle(f, &["run"]).await;
    r.expect_code(0);
    assert!(r.stdout().contains("release v2"), "{}", all(&r));

    // An `in` writing outside its artifact directory.
    let escape = r#"          {"../escaped.txt": "x"}"#;
    let f = fixture(&pipeline(&url, escape, OUT, SHOW));
    let (f, r) = treadle(f, &["run"]).await;
    assert_ne!(r.code(), 0, "{}", all(&r));
    assert!(
        all(&r).contains("leaves the artifact directory"),
        "{}",
        all(&r)
    );
    assert!(!f.path().join("escaped.txt").exists());
}
