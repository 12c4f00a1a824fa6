//! MCP servers as tools, against a real MCP server process: `treadle-mcp-fixture`
//! (proofs/src/bin/mcp_fixture.rs, rmcp's server side) over stdio and streamable HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use treadle_event::{Block, Role};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::mcp::{McpError, McpServer, McpServerConfig, McpTransport};
use treadle_session::{Session, Tool, ToolError};

const FIXTURE: &str = env!("CARGO_BIN_EXE_treadle-mcp-fixture");
const PATIENCE: Duration = Duration::from_secs(30);

fn fixture_config() -> McpServerConfig {
    McpServerConfig::stdio("fixture", FIXTURE, Vec::<String>::new())
        .with_call_timeout(Duration::from_secs(10))
}

async fn fixture() -> McpServer {
    McpServer::connect(fixture_config())
        .await
        .expect("start the fixture server")
}

async fn tool(server: &McpServer, name: &str) -> Arc<dyn Tool> {
    server
        .tools()
        .await
        .expect("list tools")
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("took longer than the test's patience")
}

#[tokio::test]
async fn lists_tools_prefixed_with_schemas() {
    let server = fixture().await;
    let tools = within(server.tools()).await.expect("list tools");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "fixture__add",
            "fixture__crash",
            "fixture__echo",
            "fixture__env_names",
            "fixture__fail",
            "fixture__pid",
            "fixture__read_path",
            "fixture__slow"
        ]
    );
    let add = tools.iter().find(|t| t.name() == "fixture__add").unwrap();
    assert_eq!(add.description(), "Adds two numbers.");
    let schema = add.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["a"]["type"], "number");
    assert_eq!(schema["required"], json!(["a", "b"]));
    server.shutdown().await;
}

#[tokio::test]
async fn call_returns_the_text_content() {
    let server = fixture().await;
    let add = tool(&server, "fixture__add").await;
    assert_eq!(
        within(add.call(json!({"a": 2, "b": 3}))).await,
        Ok("5".into())
    );
    let echo = tool(&server, "fixture__echo").await;
    assert_eq!(
        within(echo.call(json!({"text": "hi there"}))).await,
        Ok("hi there".into())
    );
    // A server-side protocol error (here a missing argument) is a readable tool error.
    let err = within(add.call(json!({"a": 2}))).await.unwrap_err();
    assert!(
        err.0.contains("fixture") && err.0.contains("missing argument `b`"),
        "{err}"
    );
    // Arguments that are not an object never reach the server.
    let err = within(add.call(json!([2, 3]))).await.unwrap_err();
    assert!(err.0.contains("must be a JSON object"), "{err}");
    server.shutdown().await;
}

#[tokio::test]
async fn is_error_becomes_a_tool_error_with_the_text() {
    let server = fixture().await;
    let fail = tool(&server, "fixture__fail").await;
    assert_eq!(
        within(fail.call(json!({"message": "disk full"}))).await,
        Err(ToolError::new("disk full"))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn crash_mid_call_fails_that_call_and_the_next_restarts() {
    let server = fixture().await;
    let pid = tool(&server, "fixture__pid").await;
    let crash = tool(&server, "fixture__crash").await;
    let add = tool(&server, "fixture__add").await;
    let before = within(pid.call(json!({}))).await.expect("pid");

    let err = within(crash.call(json!({}))).await.unwrap_err();
    assert_eq!(
        err.0,
        "MCP server fixture exited during the call; it will be restarted on the next call"
    );

    assert_eq!(
        within(add.call(json!({"a": 40, "b": 2}))).await,
        Ok("42".into())
    );
    let after = within(pid.call(json!({}))).await.expect("pid");
    assert_ne!(before, after, "the server was restarted as a new process");

    // And again: every crash costs exactly one call.
    assert!(within(crash.call(json!({}))).await.is_err());
    assert_eq!(
        within(add.call(json!({"a": 1, "b": 1}))).await,
        Ok("2".into())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_killed_between_calls_is_restarted_transparently() {
    let server = fixture().await;
    let pid = tool(&server, "fixture__pid").await;
    let before = within(pid.call(json!({}))).await.expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-9", &before])
        .status()
        .expect("run kill");
    assert!(status.success());
    // Give the client's reader time to see EOF, as it would between two model steps.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = within(pid.call(json!({}))).await.expect("restarted call");
    assert_ne!(before, after);
    server.shutdown().await;
}

#[tokio::test]
async fn a_call_past_the_timeout_fails_and_the_server_stays() {
    let server = McpServer::connect(fixture_config().with_call_timeout(Duration::from_millis(300)))
        .await
        .expect("start");
    let slow = tool(&server, "fixture__slow").await;
    let pid = tool(&server, "fixture__pid").await;
    let before = within(pid.call(json!({}))).await.expect("pid");

    let started = Instant::now();
    let err = within(slow.call(json!({"ms": 10_000}))).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.0.contains("fixture") && err.0.contains("did not finish") && err.0.contains("300ms"),
        "{err}"
    );
    // A slow tool is not a dead server: the same process answers the next call.
    assert_eq!(
        within(slow.call(json!({"ms": 10}))).await,
        Ok("slept 10 ms".into())
    );
    assert_eq!(within(pid.call(json!({}))).await, Ok(before));
    server.shutdown().await;
}

#[tokio::test]
async fn calls_on_one_server_run_concurrently() {
    let server = fixture().await;
    let slow = tool(&server, "fixture__slow").await;
    let started = Instant::now();
    let calls = (0..4).map(|_| slow.call(json!({"ms": 400})));
    let results = within(futures::future::join_all(calls)).await;
    assert!(results.iter().all(|r| r.as_deref() == Ok("slept 400 ms")));
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "4 calls of 400 ms took {:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn command_not_found_names_the_command() {
    let err = McpServer::connect(McpServerConfig::stdio(
        "ghost",
        "treadle-no-such-mcp-server",
        ["--stdio"],
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::CommandNotFound { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("ghost") && message.contains("`treadle-no-such-mcp-server` not found"),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_that_exits_at_start_fails_to_initialize_with_its_stderr() {
    let err = McpServer::connect(McpServerConfig::stdio(
        "broken",
        FIXTURE,
        ["--exit-at-start"],
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("MCP server broken failed to initialize")
            && message.contains("refusing to start"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_working_directory_is_not_reported_as_a_missing_command() {
    let mut config = fixture_config();
    if let McpTransport::Stdio { cwd, .. } = &mut config.transport {
        *cwd = Some("/nonexistent/treadle-mcp-cwd".into());
    }
    let err = McpServer::connect(config).await.unwrap_err();
    assert!(matches!(err, McpError::Spawn { .. }), "{err:?}");
    assert!(err.to_string().contains("working directory"), "{err}");
}

#[tokio::test]
async fn after_shutdown_calls_say_so_and_do_not_restart() {
    let server = fixture().await;
    let add = tool(&server, "fixture__add").await;
    server.shutdown().await;
    let err = within(add.call(json!({"a": 1, "b": 2}))).await.unwrap_err();
    assert_eq!(err.0, "MCP server fixture has been shut down");
    assert!(matches!(
        server.tools().await,
        Err(McpError::ShutDown { .. })
    ));
}

/// The fixture serving streamable HTTP, killed when dropped.
struct HttpFixture {
    _child: tokio::process::Child,
    url: String,
}

async fn http_fixture(args: &[&str]) -> HttpFixture {
    let mut child = tokio::process::Command::new(FIXTURE)
        .arg("--http")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the HTTP fixture");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    within(BufReader::new(stdout).read_line(&mut line))
        .await
        .expect("read the fixture's URL");
    HttpFixture {
        _child: child,
        url: line.trim().to_owned(),
    }
}

#[tokio::test]
async fn http_transport_lists_and_calls() {
    let fixture = http_fixture(&[]).await;
    assert!(
        fixture.url.starts_with("http://127.0.0.1:"),
        "{}",
        fixture.url
    );
    let server = within(McpServer::connect(McpServerConfig::http(
        "web",
        &fixture.url,
    )))
    .await
    .expect("connect over HTTP");
    let tools = within(server.tools()).await.expect("list");
    assert!(tools.iter().any(|t| t.name() == "web__echo"));
    let add = tools.iter().find(|t| t.name() == "web__add").unwrap();
    assert_eq!(add.parameters()["properties"]["b"]["type"], "number");
    assert_eq!(
        within(add.call(json!({"a": 2, "b": 3}))).await,
        Ok("5".into())
    );
    let fail = tools.iter().find(|t| t.name() == "web__fail").unwrap();
    assert_eq!(
        within(fail.call(json!({"message": "no"}))).await,
        Err(ToolError::new("no"))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn http_bearer_token_comes_from_the_named_variable() {
    // cargo sets CARGO_PKG_NAME for the test process too, which spares the test an
    // (unsafe, racy) set_var; the token is then "treadle-proofs".
    let token = env!("CARGO_PKG_NAME");
    assert_eq!(
        std::env::var("CARGO_PKG_NAME").as_deref(),
        Ok(token),
        "run me with cargo test"
    );
    let fixture = http_fixture(&["--bearer", token]).await;

    let anonymous = within(McpServer::connect(McpServerConfig::http(
        "web",
        &fixture.url,
    )))
    .await
    .unwrap_err();
    assert!(
        matches!(anonymous, McpError::Initialize { .. }),
        "{anonymous:?}"
    );

    let config = McpServerConfig {
        name: "web".into(),
        transport: McpTransport::Http {
            url: fixture.url.clone(),
            bearer_env: Some("CARGO_PKG_NAME".into()),
            bearer: None,
        },
        call_timeout: Duration::from_secs(10),
        effects: Default::default(),
        touches: Default::default(),
    };
    let server = within(McpServer::connect(config.clone()))
        .await
        .expect("authorized");
    let echo = tool(&server, "web__echo").await;
    // MCP says nothing reliable about effects: an undeclared tool is effectful.
    assert_eq!(echo.effect(), treadle_session::Effect::Effectful);
    assert_eq!(
        within(echo.call(json!({"text": "in"}))).await,
        Ok("in".into())
    );
    server.shutdown().await;

    // The token given directly (a caller that keeps keys out of its environment).
    let direct = McpServerConfig {
        transport: McpTransport::Http {
            url: fixture.url.clone(),
            bearer_env: None,
            bearer: Some(treadle_session::ApiKey::new(env!("CARGO_PKG_NAME").into())),
        },
        ..config
    };
    let server = within(McpServer::connect(direct))
        .await
        .expect("authorized with the token itself");
    server.shutdown().await;
}

#[tokio::test]
async fn http_bearer_variable_must_be_set() {
    let config = McpServerConfig {
        name: "web".into(),
        transport: McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            bearer_env: Some("TREADLE_TEST_UNSET_MCP_TOKEN".into()),
            bearer: None,
        },
        call_timeout: Duration::from_secs(1),
        effects: Default::default(),
        touches: Default::default(),
    };
    let err = McpServer::connect(config).await.unwrap_err();
    assert!(matches!(err, McpError::MissingBearer { .. }), "{err:?}");
    assert!(err.to_string().contains("TREADLE_TEST_UNSET_MCP_TOKEN"));
}

#[tokio::test]
async fn http_server_that_is_not_there_fails_to_initialize() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let err = within(McpServer::connect(McpServerConfig::http(
        "web",
        "http://127.0.0.1:9/mcp",
    )))
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("MCP server web failed to initialize") && message.contains(":9/mcp"),
        "{message}"
    );
}

#[tokio::test]
async fn a_session_turn_calls_an_mcp_tool() {
    let model = ScriptedServer::start(Script::new([
        Reply::tool_call("fixture__add", json!({"a": 2, "b": 3})),
        Reply::text("5"),
    ]))
    .await
    .expect("scripted model");
    let server = fixture().await;
    let tools = within(server.tools()).await.expect("list");
    let dir = tempfile::tempdir().expect("temp dir");
    let session = Session::builder()
        .endpoint(model.base_url())
        .model("m")
        .journal_path(dir.path().join("journal.redb"))
        .tools(tools)
        .start()
        .await
        .expect("start session");

    let report = within(session.turn("add").run()).await.expect("run");
    assert_eq!(report.answer().ok(), Some("5"));

    let history = session.history().await.expect("history");
    let result = history
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    assert_eq!(result, Some(("5".to_owned(), false)));

    session.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn http_server_dying_mid_call_fails_that_call_and_the_next_reconnects() {
    let first = http_fixture(&[]).await;
    let server = within(McpServer::connect(McpServerConfig::http("web", &first.url)))
        .await
        .expect("connect over HTTP");
    let crash = tool(&server, "web__crash").await;
    let pid = tool(&server, "web__pid").await;
    let before = within(pid.call(json!({}))).await.expect("pid");

    let err = within(crash.call(json!({}))).await.unwrap_err();
    assert_eq!(
        err.0,
        "the connection to MCP server web was lost during the call; it will be reconnected \
         on the next call"
    );

    // Nothing listens now: the next call tries to reconnect and says why it could not.
    let err = within(pid.call(json!({}))).await.unwrap_err();
    assert!(
        err.0.starts_with("MCP server web failed to initialize") && err.0.contains("refused"),
        "{err}"
    );

    // A new server on the same address: the next call reconnects and goes through.
    let port = first.url.trim_start_matches("http://127.0.0.1:");
    let port = port.trim_end_matches("/mcp");
    let second = http_fixture(&["--port", port]).await;
    assert_eq!(second.url, first.url);
    let after = within(pid.call(json!({}))).await.expect("reconnected call");
    assert_ne!(before, after);
    server.shutdown().await;
}
