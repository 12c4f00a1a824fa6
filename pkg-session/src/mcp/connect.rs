//! Opening one connection to an MCP server: spawn or dial, then the `initialize` handshake.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::{McpError, McpServerConfig, McpTransport, STARTUP_TIMEOUT};

/// How many stderr lines of a stdio server are kept for error messages.
const STDERR_LINES: usize = 20;
/// Longest stderr line kept; a server that dumps a blob on one line should not flood errors.
const STDERR_LINE_CHARS: usize = 500;
/// How long a failed start waits for the server's last stderr lines to arrive.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// A live, initialized connection.
pub(super) struct Connection {
    /// Owns the rmcp service loop (and with it the child process or HTTP worker). Dropping
    /// it cancels the loop; [`Connection::close`] does so and waits.
    service: RunningService<RoleClient, ClientConfig>,
}

impl Connection {
    /// A handle for requests; clones share the connection, so calls run concurrently
    /// without holding any lock of ours.
    pub(super) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// True once the service loop has ended: the process exited or the transport failed.
    pub(super) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Closes the connection: for stdio, closes stdin, waits, then SIGTERM and SIGKILL
    /// (rmcp's graceful child shutdown, a few seconds at most).
    pub(super) async fn close(mut self) {
        if let Ok(None) = self
            .service
            .close_with_timeout(Duration::from_secs(10))
            .await
        {
            tracing::warn!("MCP connection did not close within 10s; abandoning it");
        }
    }
}

/// What rmcp tells the server about us.
fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("treadle", env!("CARGO_PKG_VERSION")),
    )
}

/// Starts the server of `config` and completes the MCP handshake, within
/// [`STARTUP_TIMEOUT`].
pub(super) async fn open(config: &McpServerConfig) -> Result<Connection, McpError> {
    let server = config.name.as_str();
    match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
            prepare,
        } => {
            let spawn = Spawn {
                command,
                args,
                env,
                inherit_env: *inherit_env,
                cwd: cwd.as_deref(),
                prepare: prepare.as_ref(),
            };
            open_stdio(server, &spawn).await
        }
        McpTransport::Http {
            url,
            bearer_env,
            bearer,
        } => open_http(server, url, bearer_env.as_deref(), bearer.as_ref()).await,
    }
}

/// How to start a stdio server (its [`McpTransport::Stdio`] fields).
struct Spawn<'a> {
    command: &'a str,
    args: &'a [String],
    env: &'a [(String, String)],
    inherit_env: bool,
    cwd: Option<&'a std::path::Path>,
    prepare: Option<&'a super::Prepare>,
}

/// Spawns a server that speaks MCP on its stdin and stdout.
async fn open_stdio(server: &str, spawn: &Spawn<'_>) -> Result<Connection, McpError> {
    let Spawn {
        command,
        args,
        env,
        inherit_env,
        cwd,
        prepare,
    } = *spawn;
    if let Some(dir) = cwd
        && !dir.is_dir()
    {
        // Checked up front: spawning in a missing directory fails with NotFound,
        // which would otherwise read as "command not found".
        return Err(McpError::Spawn {
            server: server.to_owned(),
            command: command.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("working directory {} does not exist", dir.display()),
            ),
        });
    }
    let mut cmd = tokio::process::Command::new(command);
    if !inherit_env {
        cmd.env_clear();
    }
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    if let Some(prepare) = prepare {
        prepare.apply(&mut cmd).map_err(|source| McpError::Spawn {
            server: server.to_owned(),
            command: command.to_owned(),
            source,
        })?;
    }
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                McpError::CommandNotFound {
                    server: server.to_owned(),
                    command: command.to_owned(),
                }
            } else {
                McpError::Spawn {
                    server: server.to_owned(),
                    command: command.to_owned(),
                    source,
                }
            }
        })?;
    let tail = stderr.map(|stderr| StderrTail::follow(server, stderr));
    match handshake(server, client_info().serve(transport)).await {
        Ok(service) => Ok(Connection { service }),
        Err(HandshakeError::Timeout) => Err(McpError::StartupTimeout {
            server: server.to_owned(),
            timeout: STARTUP_TIMEOUT,
        }),
        Err(HandshakeError::Failed(reason)) => {
            let stderr = match tail {
                Some(tail) => tail.finish().await,
                None => Vec::new(),
            };
            Err(McpError::Initialize {
                server: server.to_owned(),
                reason,
                stderr,
            })
        }
    }
}

/// Connects to a server over streamable HTTP.
async fn open_http(
    server: &str,
    url: &str,
    bearer_env: Option<&str>,
    bearer: Option<&crate::ApiKey>,
) -> Result<Connection, McpError> {
    let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url);
    transport_config.retry_config = Arc::new(BoundedRetry);
    if let Some(token) = bearer {
        transport_config = transport_config.auth_header(token.expose().to_owned());
    } else if let Some(variable) = bearer_env {
        let token = std::env::var(variable).map_err(|_| McpError::MissingBearer {
            server: server.to_owned(),
            variable: variable.to_owned(),
        })?;
        transport_config = transport_config.auth_header(token);
    }
    crate::tls::install_crypto_provider();
    let transport = StreamableHttpClientTransport::from_config(transport_config);
    match handshake(server, client_info().serve(transport)).await {
        Ok(service) => Ok(Connection { service }),
        Err(HandshakeError::Timeout) => Err(McpError::StartupTimeout {
            server: server.to_owned(),
            timeout: STARTUP_TIMEOUT,
        }),
        Err(HandshakeError::Failed(reason)) => Err(McpError::Initialize {
            server: server.to_owned(),
            // The HTTP client's errors usually name the URL already.
            reason: if reason.contains(url) {
                reason
            } else {
                format!("{reason} (url {url})")
            },
            stderr: Vec::new(),
        }),
    }
}

/// How often a broken SSE response stream is resumed. rmcp's default retries forever, so
/// a call whose server died would hang until the call timeout instead of failing as a lost
/// connection; a few quick attempts still ride out a blip.
#[derive(Debug)]
struct BoundedRetry;

impl SseRetryPolicy for BoundedRetry {
    fn retry(&self, attempt: usize) -> Option<Duration> {
        const ATTEMPTS: usize = 3;
        (attempt < ATTEMPTS).then(|| Duration::from_millis(250) * (1 << attempt))
    }
}

enum HandshakeError {
    Timeout,
    Failed(String),
}

async fn handshake<F>(
    server: &str,
    serving: F,
) -> Result<RunningService<RoleClient, ClientConfig>, HandshakeError>
where
    F: Future<Output = Result<RunningService<RoleClient, ClientConfig>, ClientInitializeError>>,
{
    // Dropping the handshake future on timeout drops the transport, which kills a child.
    match tokio::time::timeout(STARTUP_TIMEOUT, serving).await {
        Ok(Ok(service)) => {
            tracing::debug!(server, "MCP server initialized");
            Ok(service)
        }
        Ok(Err(e)) => Err(HandshakeError::Failed(describe(&e))),
        Err(_) => Err(HandshakeError::Timeout),
    }
}

/// A readable reason for a failed handshake. rmcp's own text of a transport error leads
/// with the transport's Rust type name and stops before the cause that matters (such as
/// "Connection refused"), so the cause chain is spelled out instead.
fn describe(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            let mut parts: Vec<String> = vec![context.to_string()];
            let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error.error.as_ref());
            while let Some(e) = next {
                let text = e.to_string();
                // Wrappers often repeat their source's text; keep each piece once.
                if !parts.last().is_some_and(|last| last.contains(&text)) {
                    parts.push(text);
                }
                next = match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                    // rmcp does not mark the HTTP client's error as the source; follow it
                    // anyway, since its chain ends in the cause ("Connection refused").
                    Some(StreamableHttpError::Client(inner)) => Some(inner),
                    _ => e.source(),
                };
            }
            parts.join(": ")
        }
        ClientInitializeError::ConnectionClosed(_) => {
            "the server closed the connection before answering `initialize` (a stdio server \
             exited, or wrote no MCP to stdout)"
                .to_owned()
        }
        ClientInitializeError::JsonRpcError(data) => {
            format!("the server refused `initialize`: {}", data.message)
        }
        other => other.to_string(),
    }
}

/// Follows a stdio server's stderr: logs each line and keeps the last few.
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl StderrTail {
    fn follow(server: &str, stderr: impl AsyncRead + Send + Unpin + 'static) -> Self {
        let lines = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let kept = Arc::clone(&lines);
        let server = server.to_owned();
        // The task ends at EOF, when the server (and anything sharing its stderr) exits; it
        // is detached otherwise, so it outlives a failed start only as long as the process.
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end();
                tracing::debug!(server = %server, "MCP server stderr: {line}");
                let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
                if let Ok(mut kept) = kept.lock() {
                    if kept.len() == STDERR_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
        });
        Self { lines, reader }
    }

    /// The kept lines, after giving the reader a moment to drain what a dying server wrote.
    async fn finish(self) -> Vec<String> {
        let _ = tokio::time::timeout(STDERR_GRACE, self.reader).await;
        match self.lines.lock() {
            Ok(lines) => lines.iter().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }
}
