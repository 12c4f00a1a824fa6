//! The MCP servers of one agent step: started when the step starts, their granted tools
//! handed to the session, stopped when the step ends.
//!
//! Only servers the step's grant names are started: a server none of whose tools the step
//! may call would cost a process (or a connection) and its startup time for nothing.
//!
//! A stdio server runs in the step's sandbox, as its `run_shell` does ([`confined`]):
//! Landlock keeps it to the system, the toolchains, the step directory and, read-only, the
//! project its program lives in; it connects where the step's `network:` says.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use treadle_session::Tool;
use treadle_session::mcp::{McpError, McpServer, McpServerConfig, McpTransport, Prepare};

use crate::pipeline::mcp::{covers, server_of};

/// A granted MCP tool that its server does not offer (a typo, or a server of another
/// version): refused before the model is called, like an unknown built-in tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server `{server}` has no tool `{name}`; it offers: {}", offered.join(", "))]
pub struct MissingMcpTool {
    pub name: String,
    pub server: String,
    pub offered: Vec<String>,
}

/// Why the MCP servers of a step could not provide its tools.
#[derive(Debug, thiserror::Error)]
pub enum McpToolsError {
    #[error(transparent)]
    Server(#[from] McpError),
    #[error(transparent)]
    Missing(#[from] MissingMcpTool),
    /// The load checks refuse this in a pipeline; a step built by hand can still get here.
    #[error("tool `{tool}` names MCP server `{server}`, which the step does not configure")]
    UnknownServer { tool: String, server: String },
}

/// The running servers of one step.
#[derive(Default)]
pub struct StepServers {
    servers: Vec<McpServer>,
}

impl StepServers {
    /// Starts the servers of `configs` that `grant` names (the MCP names of the step's
    /// grant: `{server}__{tool}` or `{server}__*`) and returns them with the granted tools.
    /// On failure the servers already started are stopped again.
    pub async fn start(
        configs: &[McpServerConfig],
        grant: &[&str],
    ) -> Result<(Self, Vec<Arc<dyn Tool>>), McpToolsError> {
        let mut started = Self::default();
        match started.connect(configs, grant).await {
            Ok(tools) => Ok((started, tools)),
            Err(e) => {
                started.shutdown().await;
                Err(e)
            }
        }
    }

    async fn connect(
        &mut self,
        configs: &[McpServerConfig],
        grant: &[&str],
    ) -> Result<Vec<Arc<dyn Tool>>, McpToolsError> {
        for tool in grant {
            if let Some(server) = server_of(tool)
                && !configs.iter().any(|c| c.name == server)
            {
                return Err(McpToolsError::UnknownServer {
                    tool: (*tool).to_owned(),
                    server: server.to_owned(),
                });
            }
        }
        let mut tools = Vec::new();
        for config in configs {
            let named: Vec<&str> = grant
                .iter()
                .copied()
                .filter(|g| server_of(g) == Some(config.name.as_str()))
                .collect();
            if named.is_empty() {
                continue;
            }
            let server = McpServer::connect(config.clone()).await?;
            self.servers.push(server.clone());
            let offered = server.tools().await?;
            for name in named.iter().filter(|g| !g.ends_with('*')) {
                if !offered.iter().any(|t| t.name() == *name) {
                    return Err(MissingMcpTool {
                        name: (*name).to_owned(),
                        server: config.name.clone(),
                        offered: offered.iter().map(|t| t.name().to_owned()).collect(),
                    }
                    .into());
                }
            }
            tools.extend(offered.into_iter().filter(|t| covers(&named, t.name())));
        }
        Ok(tools)
    }

    /// Stops every server (stdin closed, then SIGTERM, then SIGKILL for a stdio one).
    pub async fn shutdown(self) {
        futures::future::join_all(self.servers.iter().map(McpServer::shutdown)).await;
    }
}

/// `configs` with each stdio server confined as the step's `run_shell` commands are
/// (docs/security.md, the policy table): its files as a task's (`ws`'s step directory
/// writable, unless the step is `confined: false`) with, read-only, `project` (where it
/// runs, and where its relative arguments point) and the directory of its program when it
/// is named by a path; and the step's `network:`. HTTP servers are treadle's own
/// connections and are left as they are.
pub fn confined(
    configs: &[McpServerConfig],
    ws: &crate::tools::Workspace,
    project: &Path,
) -> Vec<McpServerConfig> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let project = absolute(project);
    configs
        .iter()
        .cloned()
        .map(|mut config| {
            if let McpTransport::Stdio {
                command, prepare, ..
            } = &mut config.transport
            {
                let mut readable = vec![project.clone()];
                if command.contains('/') {
                    let program = project.join(&*command);
                    readable.extend(program.parent().map(Path::to_path_buf));
                }
                *prepare = Some(sandbox(ws, readable));
            }
            config
        })
        .collect()
}

/// The step's sandbox for a server, with `readable` read-only besides a task's places.
fn sandbox(ws: &crate::tools::Workspace, readable: Vec<PathBuf>) -> Prepare {
    let dir = ws.root().to_path_buf();
    let (files, network) = (ws.confined(), ws.network());
    Prepare::new(move |cmd| {
        let policy = crate::confine::Policy {
            dir: &dir,
            files,
            network: &network,
            writable: &[],
            readable: &readable,
        };
        crate::confine::confine(cmd, &policy).map_err(std::io::Error::other)
    })
}
