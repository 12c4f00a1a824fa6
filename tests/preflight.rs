//! `treadle validate --preflight`: every model and MCP server a job uses is probed live
//! (against the scripted model server and the real fixture MCP server), and a dead
//! endpoint, a refused key or a missing MCP tool fails it with a clear line.

use crate::common;

use common::Fixture;
use common::mcp::fixture_server;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Two agents on the same endpoint and model (probed once), one with an MCP tool.
fn pipeline(url: &str, mcp_tool: &str, command: &str) -> String {
    format!(
        r#"agents:
  - name: writer
    source: {{ endpoint: "{url}", model: small, api_key_env: PREFLIGHT_KEY }}
  - name: calc
    source: {{ endpoint: "{url}", model: small, api_key_env: PREFLIGHT_KEY }}
    tools: [read_file, fixture__{mcp_tool}]
    mcp_servers:
      - name: fixture
        command: {command}
jobs:
  - name: work
    plan:
      - agent: writer
        prompt: Write.
      - agent: calc
        prompt: Add.
"#
    )
}

async fn validate(yaml: String, key: &'static str) -> common::Run {
    let f = Fixture::new(&yaml);
    tokio::task::spawn_blocking(move || {
        f.treadle_env(&["validate", "--preflight"], &[("PREFLIGHT_KEY", key)])
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread")]
async fn every_model_and_mcp_server_of_the_job_is_probed() {
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let server = ScriptedServer::start(Script::new([Reply::text("ready")]))
        .await
        .unwrap();
    let run = validate(
        pipeline(server.base_url(), "add", &bin.display().to_string()),
        "sk-preflight-1",
    )
    .await;
    let out = run.stdout();
    run.expect_code(0);
    assert!(
        out.contains("model custom/small at") && out.contains(": ok ("),
        "{out}"
    );
    assert!(out.contains("MCP server fixture (agent calc): ok"), "{out}");
    // One probe for the two agents sharing a model: the smallest real request, with the key.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["max_tokens"], 1);
    assert_eq!(requests[0].body["model"], "small");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-preflight-1")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_key_a_dead_endpoint_and_a_missing_tool_fail_it() {
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let server = ScriptedServer::start(Script::new([
        Reply::status(401).body("invalid key sk-preflight-2 for this account")
    ]))
    .await
    .unwrap();
    let run = validate(
        pipeline(
            server.base_url(),
            "no_such_tool",
            &bin.display().to_string(),
        ),
        "sk-preflight-2",
    )
    .await;
    let err = run.stderr();
    run.expect_code(2);
    assert!(err.contains("answered HTTP 401"), "{err}");
    assert!(!err.contains("sk-preflight-2"), "the key is masked: {err}");
    assert!(
        err.contains("MCP server fixture (agent calc): failed") && err.contains("no_such_tool"),
        "{err}"
    );
    assert!(err.contains("preflight failed (2 check(s))"), "{err}");

    // Nothing listens on this port.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let run = validate(pipeline(&url, "add", &bin.display().to_string()), "k").await;
    let err = run.stderr();
    run.expect_code(2);
    assert!(err.contains("no answer from"), "{err}");
}
