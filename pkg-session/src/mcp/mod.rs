//! MCP servers as tools: connect a server over stdio or streamable HTTP and expose its tools.
//!
//! An [`McpServer`] owns one connection to one Model Context Protocol server, made with
//! rmcp (pinned: the SDK changes weekly). [`McpServer::tools`] lists the server's tools and
//! wraps each as a [`Tool`](crate::Tool) named `{server}__{tool}`, with the server's own
//! description and input schema, ready for `SessionBuilder::tools`.
//!
//! # What a call does
//!
//! A call goes to the server's `tools/call`. The text blocks of the result are joined with
//! newlines into the tool result; other blocks are summarised in brackets (`[image:
//! image/png]`), and a result with no content but `structuredContent` gives that JSON.
//! A result with `isError: true` becomes a [`ToolError`](crate::ToolError) carrying the
//! server's text, which the model reads like any failed call.
//!
//! # Failure and restart
//!
//! * A server that dies during a call (its process exits, or the HTTP connection drops)
//!   fails *that* call with a result naming the server, and the connection is dropped. The
//!   next call (or [`McpServer::tools`]) starts the server again first, so one crash costs
//!   one call, not the session.
//! * A call that takes longer than [`McpServerConfig::call_timeout`] fails with a timeout
//!   result, and rmcp sends the server a cancellation for it. The connection is kept: a
//!   slow tool is not a dead server.
//! * Starting a server (spawn or connect, then the MCP `initialize` handshake) is bounded by
//!   [`STARTUP_TIMEOUT`] rather than the call timeout, because servers started through
//!   `npx`/`uvx` may first download themselves.
//!
//! # Stdio servers
//!
//! The command runs with the parent's environment (unless `inherit_env` is false) plus
//! [`McpTransport::Stdio::env`], in
//! `cwd` when given, after its `prepare` (a caller's confinement). Its stderr is captured, not inherited (it would interleave with the
//! CLI's own output): each line goes to `tracing` at debug level, and the last lines are
//! quoted in the error when the server fails to start. On shutdown the server's stdin is
//! closed, then it gets SIGTERM, then SIGKILL (rmcp's graceful shutdown).
//!
//! # Names
//!
//! Tool names are `{server}__{tool}`, with every character outside `[A-Za-z0-9_-]`
//! replaced by `_`, because OpenAI-compatible endpoints reject other characters in
//! function names. The call still goes to the server under the tool's original name.

mod connect;
mod server;
mod tool;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use server::McpServer;

/// How long starting a server may take: spawning or connecting, then `initialize`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The call timeout the convenience constructors use.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Work on a stdio server's command before it is spawned ([`McpTransport::Stdio`]'s
/// `prepare`): treadle confines the server to its step's sandbox with it. An error fails
/// the start, as a spawn error does.
#[derive(Clone)]
pub struct Prepare(Arc<PrepareFn>);

type PrepareFn = dyn Fn(&mut tokio::process::Command) -> std::io::Result<()> + Send + Sync;

impl Prepare {
    /// Wraps `f`, called with the command before every start of the server.
    pub fn new(
        f: impl Fn(&mut tokio::process::Command) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }

    pub(crate) fn apply(&self, cmd: &mut tokio::process::Command) -> std::io::Result<()> {
        (self.0)(cmd)
    }
}

impl std::fmt::Debug for Prepare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepare")
    }
}

/// The same work only: two configs are equal when they share one `Prepare`.
impl PartialEq for Prepare {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Prepare {}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A subprocess speaking MCP over its stdin and stdout.
    Stdio {
        /// The program, found on `PATH` unless it is a path.
        command: String,
        args: Vec<String>,
        /// Variables added to (or overriding) the inherited environment.
        env: Vec<(String, String)>,
        /// Whether the server inherits the parent's environment (`stdio` sets it). When
        /// false it gets `env` and nothing else: pipelines pass an allow-list there, so
        /// no API key in the parent's environment reaches a server.
        inherit_env: bool,
        /// The working directory; the parent's when `None`.
        cwd: Option<PathBuf>,
        /// Work on the command before each start (the first and every restart): how a
        /// caller confines the server. `None`: the command runs as it is.
        prepare: Option<Prepare>,
    },
    /// A streamable HTTP endpoint, such as `http://127.0.0.1:8000/mcp`.
    Http {
        url: String,
        /// The name of an environment variable holding a bearer token, sent as
        /// `Authorization: Bearer <token>`. Read when the server is (re)connected, so a
        /// rotated token is picked up by the next restart.
        bearer_env: Option<String>,
        /// The bearer token itself, which wins over `bearer_env`: for a caller that took
        /// its keys out of the process environment.
        bearer: Option<crate::ApiKey>,
    },
}

/// One MCP server: its name (the prefix of its tools' names), how to reach it, and how
/// long one tool call may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    pub call_timeout: Duration,
    /// What its tools do to the world, by the server's tool name; a tool not listed is
    /// [`Effect::Effectful`](crate::Effect::Effectful) (MCP says nothing reliable about it).
    pub effects: std::collections::BTreeMap<String, crate::Effect>,
    /// What its tools touch, by the server's tool name: a listed tool writes (and may read)
    /// those places only, so its calls run in parallel with calls touching other places;
    /// a tool not listed may touch anything (see [`crate::Tool::touches`]).
    pub touches: std::collections::BTreeMap<String, Vec<crate::Place>>,
}

impl McpServerConfig {
    /// A stdio server running `command args..`, with [`DEFAULT_CALL_TIMEOUT`].
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: Vec::new(),
                inherit_env: true,
                cwd: None,
                prepare: None,
            },
            call_timeout: DEFAULT_CALL_TIMEOUT,
            effects: Default::default(),
            touches: Default::default(),
        }
    }

    /// A streamable HTTP server at `url`, without authorization, with
    /// [`DEFAULT_CALL_TIMEOUT`].
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Http {
                url: url.into(),
                bearer_env: None,
                bearer: None,
            },
            call_timeout: DEFAULT_CALL_TIMEOUT,
            effects: Default::default(),
            touches: Default::default(),
        }
    }

    /// The same config, declaring what the server's tool `tool` does to the world.
    pub fn with_effect(mut self, tool: impl Into<String>, effect: crate::Effect) -> Self {
        self.effects.insert(tool.into(), effect);
        self
    }

    /// The same config, declaring that the server's tool `tool` touches only `places` (an
    /// empty list: nothing another call could see).
    pub fn with_touches(
        mut self,
        tool: impl Into<String>,
        places: impl IntoIterator<Item = crate::Place>,
    ) -> Self {
        self.touches
            .insert(tool.into(), places.into_iter().collect());
        self
    }

    /// The same config with another call timeout.
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }
}

/// Why an MCP server could not be started, listed or used.
///
/// Reasons from rmcp are carried as text so that this type does not tie callers to the
/// pinned rmcp version.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server}: command `{command}` not found (is it installed and on PATH?)")]
    CommandNotFound { server: String, command: String },

    #[error("MCP server {server}: could not start `{command}`: {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "MCP server {server}: the bearer token variable {variable} is not set (or not unicode)"
    )]
    MissingBearer { server: String, variable: String },

    #[error("MCP server {server} failed to initialize: {reason}{}", stderr_suffix(.stderr))]
    Initialize {
        server: String,
        reason: String,
        /// The last lines the server wrote to stderr, if it is a subprocess.
        stderr: Vec<String>,
    },

    #[error("MCP server {server} did not finish starting within {timeout:?}")]
    StartupTimeout { server: String, timeout: Duration },

    #[error("MCP server {server}: listing its tools failed: {reason}")]
    List { server: String, reason: String },

    #[error("MCP server {server} has been shut down")]
    ShutDown { server: String },
}

fn stderr_suffix(stderr: &[String]) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", stderr.join("\n"))
    }
}
