//! An agent's own tools in pipelines, against the scripted model server: custom tools
//! (a command with `{{ .args.NAME }}`, pinned `args:`, `max_calls:`, `required:`) and the
//! built-in `web_fetch` against a loopback web server (its host fence, redirects, size and
//! type limits).

use crate::common;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

/// The `tool` messages of the last request the model server saw, in order.
fn tool_results(server: &ScriptedServer) -> Vec<String> {
    let requests = server.requests();
    let last = requests.last().expect("a request");
    last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The function names and schemas offered in the first request.
fn offered(server: &ScriptedServer) -> Vec<Value> {
    server.requests()[0].body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

const POSTER: &str = r#"
agents:
  - name: reviewer
    tools:
      - read_file
      - name: post_review
        description: Post the review. body is the review text.
        run: |
          printf '%s|%s\n' {{ .args.repo }} {{ .args.body }} >> out/posted.txt
        required: true
        max_calls: 1
        args:
          repo: jtarchie/ci
jobs:
  - name: review
    plan:
      - agent: reviewer
        outputs: [out]
        prompt: Review the change and post your conclusion.
        assert:
          tool_calls:
            - name: post_review
              args: { body: "looks correct $(touch out/pwned) `touch out/pwned2`; touch out/pwned3" }
      - task: show
        inputs: [out]
        run: cat out/posted.txt; ls out
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_tool_runs_its_command_with_pinned_args_and_quoted_values() {
    let body = "looks correct $(touch out/pwned) `touch out/pwned2`; touch out/pwned3";
    let server = ScriptedServer::start(Script::new([
        // The model tries to override the pinned repo; the pipeline's value wins.
        Reply::tool_calls([
            ToolCall::new("post_review", json!({"body": body, "repo": "evil/repo"})),
            ToolCall::new("post_review", json!({"body": "again"})),
        ]),
        Reply::text("Posted."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(POSTER).run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    // The value reached the command as text: written whole, and nothing it names was run.
    assert!(out.contains(&format!("jtarchie/ci|{body}")), "{out}");
    let listed: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim_end().rsplit("│ ").next())
        .collect();
    for file in ["pwned", "pwned2", "pwned3"] {
        assert!(!listed.contains(&file), "a value ran as shell code:\n{out}");
    }
    assert!(listed.contains(&"posted.txt"), "{out}");
    // The schema the model saw has `body` and not the pinned `repo`.
    let tool = offered(&server)
        .into_iter()
        .find(|t| t["function"]["name"] == "post_review")
        .expect("post_review offered");
    let params = &tool["function"]["parameters"];
    assert_eq!(params["required"], json!(["body"]), "{params}");
    assert!(params["properties"].get("repo").is_none(), "{params}");
    // The second call of the batch was past `max_calls: 1`: refused before it ran.
    let results = tool_results(&server);
    assert_eq!(results.len(), 2, "{results:?}");
    let first: Value = serde_json::from_str(&results[0]).expect("JSON result");
    assert_eq!(first["exit_code"], 0, "{first}");
    assert!(
        results[1].contains("call budget exhausted"),
        "{}",
        results[1]
    );
    assert!(!out.contains("|again"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_required_tool_never_called_is_asked_for_then_fails_the_step() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("I reviewed it."),
        Reply::text("Still fine."),
        Reply::text("Really fine."),
        Reply::text("Done."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(POSTER).run_at(server.base_url()).await;
    run.expect_code(1);
    let out = run.stdout();
    assert!(
        out.contains("required tool(s) never succeeded: post_review"),
        "{out}"
    );
    // The model was told by name, three times, before the step gave up.
    assert_eq!(server.request_count(), 4);
    let last = server.requests().pop().expect("request").body.to_string();
    assert!(
        last.contains("a call of `post_review` has succeeded"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_required_tool_that_fails_then_succeeds_satisfies_the_step() {
    let yaml = r#"
agents:
  - name: tagger
    tools:
      - name: tag
        description: Tag a release. version is the tag.
        run: test {{ .args.version }} = v1 && echo tagged {{ .args.version }}
        required: true
plan:
  - agent: tagger
    prompt: Tag the release.
"#;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("tag", json!({"version": "v0"})),
        Reply::text("Tagged."),
        Reply::tool_call("tag", json!({"version": "v1"})),
        Reply::text("Tagged v1."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    let results = tool_results(&server);
    // A non-zero exit is data for the model, not the end of the turn.
    assert!(results[0].contains(r#""exit_code":1"#), "{results:?}");
    assert!(results[1].contains("tagged v1"), "{results:?}");
}

/// A loopback web server: `/page` (text), `/big` (200 KB of text), `/image` (PNG bytes),
/// `/hop` (a redirect to `localhost`, which the fence below does not allow).
async fn web() -> (String, tokio::task::JoinHandle<()>) {
    use axum::{Router, http::header, response::IntoResponse, routing::get};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = Router::new()
        .route("/page", get(|| async { "hello from the web" }))
        .route("/big", get(|| async { "x".repeat(200_000) }))
        .route(
            "/image",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', 0]) }),
        )
        .route(
            "/hop",
            get(move || async move {
                axum::response::Redirect::temporary(&format!("http://localhost:{port}/page"))
                    .into_response()
            }),
        );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{port}"), task)
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_reads_text_within_its_fence_and_limits() {
    let (base, _web) = web().await;
    let yaml = r#"
agents:
  - name: auditor
    tools:
      - write_file
      - builtin: web_fetch
        allow: [127.0.0.1]
plan:
  - agent: auditor
    prompt: Check the pages.
    assert:
      tool_calls:
        - name: web_fetch
"#;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([
            ToolCall::new("web_fetch", json!({"url": format!("{base}/page")})),
            ToolCall::new("web_fetch", json!({"url": format!("{base}/big")})),
            ToolCall::new("web_fetch", json!({"url": format!("{base}/image")})),
            ToolCall::new("web_fetch", json!({"url": format!("{base}/hop")})),
            ToolCall::new("web_fetch", json!({"url": "https://issues.example/open"})),
            ToolCall::new("web_fetch", json!({"url": "file:///etc/passwd"})),
        ]),
        Reply::text("Checked."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert_eq!(results.len(), 6, "{results:?}");
    let page: Value = serde_json::from_str(&results[0]).expect("JSON");
    assert_eq!(page["status"], 200);
    assert_eq!(page["body"], "hello from the web");
    assert_eq!(page["truncated"], false);
    let big: Value = serde_json::from_str(&results[1]).expect("JSON");
    assert_eq!(big["truncated"], true);
    assert_eq!(big["body"].as_str().map(str::len), Some(100_000));
    assert!(
        results[2].contains("only text is fetched"),
        "{}",
        results[2]
    );
    // The redirect's second hop leaves the fence: refused mid-way, naming host and list.
    assert!(
        results[3].contains("redirects to http://localhost")
            && results[3].contains("host `localhost` is not allowed")
            && results[3].contains("127.0.0.1"),
        "{}",
        results[3]
    );
    assert!(
        results[4].contains("host `issues.example` is not allowed")
            && results[4].contains("web_fetch allow: list"),
        "{}",
        results[4]
    );
    assert!(
        results[5].contains("only http:// and https://"),
        "{}",
        results[5]
    );
    // The model was told about the fence in the tool's own description.
    let fetch = offered(&server)
        .into_iter()
        .find(|t| t["function"]["name"] == "web_fetch")
        .expect("web_fetch offered");
    assert!(
        fetch["function"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("127.0.0.1")),
        "{fetch}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_never_returns_the_model_key() {
    let (base, _web) = web().await;
    // The page the model fetches prints the key of the model it runs with.
    let yaml = format!(
        r#"
agents:
  - name: reader
    source: {{ model: m, endpoint: "URL", api_key_env: READER_KEY }}
    tools: [web_fetch]
plan:
  - agent: reader
    prompt: Fetch {base}/page.
"#
    );
    let key = "sk-reader-0123456789abcdef";
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "web_fetch",
            json!({"url": format!("http://user:{key}@127.0.0.1:1/x")}),
        ),
        Reply::text("Done."),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(&yaml.replace("URL", server.base_url()));
    let run = tokio::task::spawn_blocking(move || f.treadle_env(&["run"], &[("READER_KEY", key)]))
        .await
        .expect("thread");
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(results[0].contains("user name or password"), "{results:?}");
    assert!(!results[0].contains(key), "{results:?}");
    assert!(!run.stdout().contains(key), "{}", run.stdout());
}
