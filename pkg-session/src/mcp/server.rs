//! [`McpServer`]: one server's connection, restarted when it dies, shared by its tools.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::Mutex;

use super::connect::{self, Connection};
use super::tool::{self, McpTool};
use super::{McpError, McpServerConfig, McpTransport};
use crate::tool::{Tool, ToolError};

/// A connected MCP server. Cheap to clone: clones (and the tools made by
/// [`McpServer::tools`]) share one connection.
///
/// The connection is restarted on demand: when the server has died (mid-call or between
/// calls), the next call or listing starts it again first. See the [module
/// docs](super) for what a call returns in each case.
///
/// ```no_run
/// use std::time::Duration;
/// use treadle_session::Session;
/// use treadle_session::mcp::{McpServer, McpServerConfig};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let files = McpServer::connect(
///     McpServerConfig::stdio(
///         "files",
///         "npx",
///         ["-y", "@modelcontextprotocol/server-filesystem", "."],
///     )
///     .with_call_timeout(Duration::from_secs(30)),
/// )
/// .await?;
///
/// // Each tool is named `files__<tool>` and carries the server's schema.
/// let tools = files.tools().await?;
/// let session = Session::builder()
///     .endpoint("http://127.0.0.1:8080/v1")
///     .model("local")
///     .tools(tools)
///     .start()
///     .await?;
/// let report = session.turn("List the files here.").run().await?;
/// println!("{}", report.answer()?);
///
/// session.shutdown().await;
/// files.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    config: McpServerConfig,
    /// Held while (re)connecting, so concurrent callers that find the server dead wait for
    /// one restart instead of each starting a process. Never held during a call.
    state: Mutex<State>,
}

struct State {
    conn: Option<Connection>,
    /// Bumped on every (re)connect. A call remembers the generation it ran on, so a late
    /// failure of an old connection cannot tear down the one that replaced it.
    generation: u64,
    shut_down: bool,
}

/// How a request on a live connection went wrong.
enum Failure {
    /// The transport closed under the request: the server exited or the connection dropped.
    Lost,
    /// Anything else; the connection is fine.
    Other(String),
}

fn classify(error: ServiceError) -> Failure {
    match error {
        ServiceError::TransportClosed
        | ServiceError::TransportSend(_)
        | ServiceError::Cancelled { .. } => Failure::Lost,
        ServiceError::McpError(data) => Failure::Other(data.message.into_owned()),
        other => Failure::Other(other.to_string()),
    }
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.config.name)
            .field("transport", &self.inner.config.transport)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts (or dials) the server and completes the MCP handshake.
    pub async fn connect(config: McpServerConfig) -> Result<McpServer, McpError> {
        let conn = connect::open(&config).await?;
        Ok(McpServer {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(State {
                    conn: Some(conn),
                    generation: 1,
                    shut_down: false,
                }),
            }),
        })
    }

    /// The server's name, the prefix of its tools' names.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.inner.config
    }

    /// Lists the server's tools (all pages) and wraps each as a [`Tool`] named
    /// `{server}__{tool}`. Restarts the server first if it has died, and once more if it
    /// dies during the listing.
    pub async fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let server = self.name();
        let mut attempts = 0;
        let listed = loop {
            attempts += 1;
            let (peer, generation) = self.live().await?;
            let outcome =
                tokio::time::timeout(self.inner.config.call_timeout, peer.list_all_tools()).await;
            match outcome {
                Ok(Ok(listed)) => break listed,
                Err(_) => {
                    return Err(McpError::List {
                        server: server.to_owned(),
                        reason: format!("no answer within {:?}", self.inner.config.call_timeout),
                    });
                }
                Ok(Err(e)) => match classify(e) {
                    Failure::Lost if attempts < 2 => self.forget(generation).await,
                    Failure::Lost => {
                        self.forget(generation).await;
                        return Err(McpError::List {
                            server: server.to_owned(),
                            reason: "the server exited (twice) while listing".to_owned(),
                        });
                    }
                    Failure::Other(reason) => {
                        return Err(McpError::List {
                            server: server.to_owned(),
                            reason,
                        });
                    }
                },
            }
        };
        Ok(listed
            .into_iter()
            .map(|t| Arc::new(McpTool::new(self.clone(), t)) as Arc<dyn Tool>)
            .collect())
    }

    /// Closes the connection and stops the server process (stdin closed, then SIGTERM,
    /// then SIGKILL). Later calls of its tools fail with a result saying so; it is not
    /// restarted.
    pub async fn shutdown(&self) {
        let conn = {
            let mut state = self.inner.state.lock().await;
            state.shut_down = true;
            state.conn.take()
        };
        if let Some(conn) = conn {
            conn.close().await;
        }
    }

    /// A handle on a live connection, restarting the server when it has died.
    async fn live(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
        let mut state = self.inner.state.lock().await;
        if state.shut_down {
            return Err(McpError::ShutDown {
                server: self.name().to_owned(),
            });
        }
        if let Some(conn) = &state.conn
            && !conn.is_closed()
        {
            return Ok((conn.peer(), state.generation));
        }
        tracing::info!(server = self.name(), "MCP server is gone; restarting it");
        if let Some(dead) = state.conn.take() {
            tokio::spawn(dead.close());
        }
        let conn = connect::open(&self.inner.config).await?;
        state.generation += 1;
        let peer = conn.peer();
        state.conn = Some(conn);
        Ok((peer, state.generation))
    }

    /// Drops the connection of `generation` (if it is still the current one), so the next
    /// request restarts the server. Closing runs in the background: the failed call should
    /// not wait for a dead process to be reaped.
    async fn forget(&self, generation: u64) {
        let mut state = self.inner.state.lock().await;
        if state.generation == generation
            && let Some(conn) = state.conn.take()
        {
            tokio::spawn(conn.close());
        }
    }

    async fn is_shut_down(&self) -> bool {
        self.inner.state.lock().await.shut_down
    }

    /// Runs `tools/call` for the server's tool `tool` (its own name, not the prefixed one).
    pub(super) async fn call_tool(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<String, ToolError> {
        let server = self.name();
        let timeout = self.inner.config.call_timeout;
        let (peer, generation) = self.live().await.map_err(|e| match e {
            McpError::ShutDown { .. } => ToolError::new(e.to_string()),
            e => ToolError::new(format!(
                "{e}. The call to {tool} was not made; the next call will try to start the \
                 server again."
            )),
        })?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // Dropping the request future on timeout makes rmcp send `notifications/cancelled`
        // for it, so the server can stop working on it.
        let outcome = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        match outcome {
            Ok(Ok(result)) => tool::result_text(result),
            Err(_) | Ok(Err(ServiceError::Timeout { .. })) => Err(ToolError::new(format!(
                "MCP server {server} did not finish {tool} within {timeout:?}; the call was \
                 cancelled"
            ))),
            Ok(Err(e)) => match classify(e) {
                Failure::Other(reason) => Err(ToolError::new(format!(
                    "MCP server {server} failed the call to {tool}: {reason}"
                ))),
                Failure::Lost => {
                    self.forget(generation).await;
                    if self.is_shut_down().await {
                        return Err(ToolError::new(format!(
                            "MCP server {server} was shut down during the call to {tool}"
                        )));
                    }
                    Err(ToolError::new(match &self.inner.config.transport {
                        McpTransport::Stdio { .. } => format!(
                            "MCP server {server} exited during the call; it will be \
                             restarted on the next call"
                        ),
                        McpTransport::Http { .. } => format!(
                            "the connection to MCP server {server} was lost during the call; \
                             it will be reconnected on the next call"
                        ),
                    }))
                }
            },
        }
    }
}
