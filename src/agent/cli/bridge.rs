//! The loopback MCP server through which a CLI agent reaches the step's tools that are not
//! its own: custom `run:` tools, `mcp:` grants, built-ins the CLI has no tool for, and the
//! `verdict` tool. They are the same [`Tool`] values a hosted agent's session runs, so a
//! call does the same thing either way, and the verdict is captured here, in treadle's
//! process, the moment it is called.
//!
//! The server listens on `127.0.0.1` on a port of its own and answers only requests that
//! carry the step's token (`Authorization: Bearer …`), made fresh for the step and gone
//! with it; credentials of the tools stay in this process. It speaks streamable HTTP with
//! rmcp's server side (the project's MCP client is rmcp already).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::response::IntoResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;
use treadle_session::Tool;

/// Why the bridge did not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the MCP bridge for the CLI agent on 127.0.0.1: {0}")]
pub struct BridgeError(#[from] std::io::Error);

/// A running bridge; it stops when dropped.
pub struct Bridge {
    url: String,
    token: String,
    port: u16,
    stop: CancellationToken,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Bridge {
    /// Serves `tools` on a loopback port until the bridge is dropped.
    pub async fn start(tools: Vec<Arc<dyn Tool>>) -> Result<Self, BridgeError> {
        let token = fresh_token();
        let stop = CancellationToken::new();
        let offered = Offered {
            tools: Arc::new(
                tools
                    .into_iter()
                    .map(|t| (t.name().to_owned(), t))
                    .collect(),
            ),
        };
        let mut config = StreamableHttpServerConfig::default();
        config.cancellation_token = stop.child_token();
        let service: StreamableHttpService<Offered, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(offered.clone()), Arc::default(), config);
        let expected = format!("Bearer {token}");
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
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
        let addr = serve_on_loopback(router, stop.clone(), "MCP bridge").await?;
        let url = format!("http://{addr}/mcp");
        Ok(Self {
            url,
            token,
            port: addr.port(),
            stop,
        })
    }

    /// Its loopback port, which a confined CLI must reach whatever its `network:`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The bridge's URL (`http://127.0.0.1:PORT/mcp`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The step's token, which every request must carry as `Authorization: Bearer`.
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// Serves `router` on a fresh loopback port until `stop` is cancelled; the address it
/// listens on. `what` names the server in the warning if it stops on an error.
pub(super) async fn serve_on_loopback(
    router: axum::Router,
    stop: CancellationToken,
    what: &'static str,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!("the CLI agent's {what} stopped: {e}");
        }
    });
    Ok(addr)
}

/// 256 random bits, hex: guessing it is out of reach for another local process.
pub(super) fn fresh_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The step's bridged tools, by name.
#[derive(Clone)]
struct Offered {
    tools: Arc<BTreeMap<String, Arc<dyn Tool>>>,
}

fn schema(tool: &dyn Tool) -> Arc<JsonObject> {
    match tool.parameters() {
        serde_json::Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

impl ServerHandler for Offered {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("treadle", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .values()
            .map(|t| {
                rmcp::model::Tool::new(
                    t.name().to_owned(),
                    t.description().to_owned(),
                    schema(t.as_ref()),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.tools.get(request.name.as_ref()) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named `{}`", request.name),
                None,
            ));
        };
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        // A failed call is the model's to read, as on the hosted path, not a protocol error.
        Ok(match tool.call(arguments).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.0)]),
        }
        .into())
    }
}
