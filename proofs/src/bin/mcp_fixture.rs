//! `treadle-mcp-fixture`: a small, real MCP server (rmcp's server side) for the MCP tests.
//!
//! It serves over stdio by default. With `--http` it serves streamable HTTP on an ephemeral
//! loopback port instead and prints its URL (`http://127.0.0.1:PORT/mcp`) as the first line
//! of stdout, so a test can read where to connect; `--port N` picks the port instead (to
//! stand a server up again where a dead one was), and `--bearer TOKEN` answers 401 to any
//! request without `Authorization: Bearer TOKEN`. With `--exit-at-start` it writes a reason
//! to stderr and exits 2 before speaking MCP, which is how a broken server looks to a client.
//!
//! Tools:
//!
//! * `add {a, b}`: the sum, as text (integers stay integers);
//! * `echo {text}`: the text back;
//! * `fail {message}`: a result with `isError: true` and the message;
//! * `crash {}`: the process exits with status 3 in the middle of the call;
//! * `slow {ms}`: sleeps `ms` milliseconds, then answers;
//! * `pid {}`: the server's process id, so a test can see that a restart made a new process.
//! * `read_path {path}`: the file's text, or why it cannot be read (a sandbox's refusal).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

#[derive(Clone, Copy)]
struct Fixture;

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "add",
            "Adds two numbers.",
            schema(json!({
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First addend."},
                    "b": {"type": "number", "description": "Second addend."}
                },
                "required": ["a", "b"]
            })),
        ),
        Tool::new(
            "echo",
            "Says the text back.",
            schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })),
        ),
        Tool::new(
            "fail",
            "Always fails with the given message (isError: true).",
            schema(json!({
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"]
            })),
        ),
        Tool::new(
            "crash",
            "Exits the server process in the middle of the call.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "slow",
            "Sleeps for ms milliseconds, then answers.",
            schema(json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0}},
                "required": ["ms"]
            })),
        ),
        Tool::new(
            "pid",
            "The server's process id.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "read_path",
            "Reads the file at path: its text, or why it cannot be read.",
            schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"]
            })),
        ),
        Tool::new(
            "env_names",
            "The names of the server's environment variables, one per line, sorted.",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ]
}

fn arg<'a>(request: &'a CallToolRequestParams, key: &str) -> Result<&'a Value, ErrorData> {
    request
        .arguments
        .as_ref()
        .and_then(|args| args.get(key))
        .ok_or_else(|| ErrorData::invalid_params(format!("missing argument `{key}`"), None))
}

fn text(value: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(value)]).into())
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("treadle-mcp-fixture", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "add" => {
                let (a, b) = (arg(&request, "a")?, arg(&request, "b")?);
                match (a.as_i64(), b.as_i64(), a.as_f64(), b.as_f64()) {
                    (Some(a), Some(b), _, _) => text(a.saturating_add(b).to_string()),
                    (_, _, Some(a), Some(b)) => text((a + b).to_string()),
                    _ => Err(ErrorData::invalid_params("a and b must be numbers", None)),
                }
            }
            "echo" => match arg(&request, "text")? {
                Value::String(s) => text(s.clone()),
                _ => Err(ErrorData::invalid_params("text must be a string", None)),
            },
            "fail" => {
                let message = arg(&request, "message")?
                    .as_str()
                    .unwrap_or("failed")
                    .to_owned();
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
            }
            "crash" => {
                // Say goodbye on stderr first, so a client that captures stderr has something
                // to show; then die without answering, like a server that segfaults.
                let mut stderr = tokio::io::stderr();
                let _ = stderr.write_all(b"fixture: crashing on purpose\n").await;
                let _ = stderr.flush().await;
                std::process::exit(3)
            }
            "slow" => {
                let ms = arg(&request, "ms")?.as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            "pid" => text(std::process::id().to_string()),
            "read_path" => {
                let path = arg(&request, "path")?.as_str().unwrap_or_default();
                match std::fs::read_to_string(path) {
                    Ok(content) => text(content),
                    Err(e) => text(format!("cannot read {path}: {e}")),
                }
            }
            "env_names" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .map(|(k, _)| k.to_string_lossy().into_owned())
                    .collect();
                names.sort();
                text(names.join("\n"))
            }
            other => Err(ErrorData::invalid_params(
                Cow::Owned(format!("no tool named `{other}`")),
                None,
            )),
        }
    }
}

async fn serve_http(port: u16, bearer: Option<String>) -> std::io::Result<()> {
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Fixture),
        Arc::default(),
        StreamableHttpServerConfig::default(),
    );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(token) = bearer {
        let expected = format!("Bearer {token}");
        router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let authorized = request
                    .headers()
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    == Some(expected.as_str());
                async move {
                    if authorized {
                        next.run(request).await
                    } else {
                        axum::http::StatusCode::UNAUTHORIZED.into_response()
                    }
                }
            },
        ));
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("http://{addr}/mcp\n").as_bytes())
        .await?;
    stdout.flush().await?;
    axum::serve(listener, router).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--exit-at-start") {
        eprintln!("fixture: refusing to start (--exit-at-start)");
        std::process::exit(2);
    }
    if args.iter().any(|a| a == "--http") {
        let port = match args.iter().position(|a| a == "--port") {
            Some(i) => args.get(i + 1).ok_or("--port needs a number")?.parse()?,
            None => 0,
        };
        let bearer = match args.iter().position(|a| a == "--bearer") {
            Some(i) => Some(args.get(i + 1).ok_or("--bearer needs a token")?.clone()),
            None => None,
        };
        serve_http(port, bearer).await?;
        return Ok(());
    }
    let running = Fixture.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
