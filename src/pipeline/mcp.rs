//! MCP servers in a pipeline: the names a grant uses for their tools, the load-time checks
//! of `mcp_servers:` entries, and their conversion to the session crate's configs.
//!
//! A grant names an MCP tool as `{server}__{tool}` (the name the session crate exposes it
//! under) or a whole server as `{server}__*`. Whether the tool exists is only known once
//! the server runs, so the load checks stop at the server being declared; the agent step
//! refuses a granted tool the server does not offer before the model is called.

use std::collections::BTreeSet;
use std::path::Path;

use treadle_session::mcp::{DEFAULT_CALL_TIMEOUT, McpServerConfig, McpTransport};

use super::agent_def::{Agent, McpServerSpec};
use super::at::Pos;
use super::diagnostic::{Finding, Problem};
use super::tool_grant::SEPARATOR;
use crate::environ::find_program;

/// The server part of an MCP tool name (`fixture` in `fixture__add`), if it has one.
pub fn server_of(tool: &str) -> Option<&str> {
    tool.split_once(SEPARATOR).map(|(server, _)| server)
}

/// Whether `grant` allows `tool`: it is named, or it is an MCP tool whose server the grant
/// names as `{server}__*`.
pub fn covers<S: AsRef<str>>(grant: &[S], tool: &str) -> bool {
    grant.iter().any(|g| {
        let g = g.as_ref();
        g == tool
            || g.strip_suffix("*")
                .is_some_and(|prefix| prefix.ends_with(SEPARATOR) && tool.starts_with(prefix))
    })
}

/// The session configs of an agent's servers. An entry with neither `command:` nor
/// `endpoint:` is left out (the load checks refuse it; `command:` wins over both).
pub fn configs(agent: &Agent) -> Vec<McpServerConfig> {
    agent.mcp_servers.iter().filter_map(config).collect()
}

fn config(spec: &McpServerSpec) -> Option<McpServerConfig> {
    let name = spec.name.value.clone();
    let transport = match (&spec.command, &spec.endpoint) {
        (Some(command), _) => McpTransport::Stdio {
            command: command.value.clone(),
            args: spec.args.clone(),
            // The allow-listed environment plus the server's own `env:`; never the keys.
            env: crate::environ::command_env(&[])
                .into_iter()
                .chain(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())))
                .collect(),
            inherit_env: false,
            cwd: None,
            // The step's sandbox is added where the step is known (`agent::mcp`).
            prepare: None,
        },
        (None, Some(url)) => McpTransport::Http {
            url: url.value.clone(),
            bearer_env: spec.bearer_env.as_ref().map(|v| v.value.clone()),
            // Read where `main` keeps it: the variable is gone from the environment.
            bearer: spec
                .bearer_env
                .as_ref()
                .and_then(|v| crate::environ::var(&v.value))
                .map(treadle_session::ApiKey::new),
        },
        (None, None) => return None,
    };
    Some(McpServerConfig {
        name,
        transport,
        call_timeout: DEFAULT_CALL_TIMEOUT,
        effects: spec.effects.clone(),
        // An MCP tool's places are names of the pipeline's choosing, kept apart from the
        // file places of the built-in tools.
        touches: spec
            .touches
            .iter()
            .map(|(tool, places)| {
                let places = places
                    .iter()
                    .map(|p| treadle_session::Place::new(format!("mcp:{p}")))
                    .collect();
                (tool.clone(), places)
            })
            .collect(),
    })
}

/// Checks an agent's `mcp_servers:` entries: each is named once with a usable name and
/// has exactly one transport, with only that transport's keys.
pub(super) fn check_servers(agent: &Agent) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for spec in &agent.mcp_servers {
        let name = &spec.name;
        let bad = |message: String, hint: &str| -> Finding {
            (name.pos, Problem::InvalidValue, message, hint.to_owned())
        };
        // The name prefixes the tools' names: a character an endpoint rejects in function
        // names, or a `__` that makes the split ambiguous, would misroute the grant.
        let usable = name
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if name.value.is_empty() || !usable || name.value.contains(SEPARATOR) {
            out.push(bad(
                format!("MCP server name `{}` cannot prefix tool names", name.value),
                "use letters, digits, `-` and single `_`, e.g. `name: github`",
            ));
        }
        if !seen.insert(name.value.as_str()) {
            out.push((
                name.pos,
                Problem::Duplicate,
                format!(
                    "MCP server `{}` is declared twice for agent `{}`",
                    name.value, agent.name.value
                ),
                "give each server its own name".to_owned(),
            ));
        }
        match (&spec.command, &spec.endpoint) {
            (None, None) => out.push((
                name.pos,
                Problem::MissingKey,
                format!(
                    "MCP server `{}` has no `command:` or `endpoint:`",
                    name.value
                ),
                "add `command:` to run it on stdio, or `endpoint:` for its HTTP URL".to_owned(),
            )),
            (Some(_), Some(_)) => out.push(bad(
                format!(
                    "MCP server `{}` has both `command:` and `endpoint:`",
                    name.value
                ),
                "keep `command:` for a local server or `endpoint:` for a remote one",
            )),
            (Some(_), None) if spec.bearer_env.is_some() => out.push(bad(
                format!(
                    "MCP server `{}`: `bearer_env:` only applies to `endpoint:`",
                    name.value
                ),
                "pass a stdio server its token with `env:` instead",
            )),
            (None, Some(_)) if !spec.args.is_empty() || !spec.env.is_empty() => out.push(bad(
                format!(
                    "MCP server `{}`: `args:` and `env:` only apply to `command:`",
                    name.value
                ),
                "remove them, or run the server locally with `command:`",
            )),
            _ => {}
        }
    }
    out
}

/// The problem with an MCP tool name (one [`server_of`] splits) in `agent`'s grant: its
/// server is not declared. `None` when it is.
pub(super) fn undeclared(agent: &Agent, tool: &str, pos: Pos) -> Option<Finding> {
    let server = server_of(tool)?;
    if agent.mcp_servers.iter().any(|s| s.name.value == server) {
        return None;
    }
    let declared: Vec<&str> = agent
        .mcp_servers
        .iter()
        .map(|s| s.name.value.as_str())
        .collect();
    let hint = if declared.is_empty() {
        format!(
            "declare it under the agent's `mcp_servers:` (`- name: {server}` with `command:` or `endpoint:`)"
        )
    } else {
        format!(
            "servers of this agent: {}; or declare `{server}` under its `mcp_servers:`",
            declared.join(", ")
        )
    };
    Some((
        pos,
        Problem::UnknownTool,
        format!(
            "tool `{tool}` comes from MCP server `{server}`, which agent `{}` does not declare",
            agent.name.value
        ),
        hint,
    ))
}

/// `validate`'s checks of this machine: each stdio server's command exists, and each
/// bearer token variable is set.
pub(super) fn check_machine(agent: &Agent, env: &dyn Fn(&str) -> Option<String>) -> Vec<Finding> {
    let mut out = Vec::new();
    for spec in &agent.mcp_servers {
        if let Some(command) = &spec.command {
            let cmd = &command.value;
            // A name with a slash is a path (relative to where treadle runs, as when the
            // server is started); anything else is looked up on PATH, as the spawn does.
            let found = if cmd.contains('/') {
                Path::new(cmd).is_file()
            } else {
                find_program(cmd).is_some()
            };
            if !found {
                out.push((
                    command.pos,
                    Problem::Machine,
                    format!(
                        "MCP server `{}`: command `{cmd}` is not on PATH",
                        spec.name.value
                    ),
                    format!("install `{cmd}` or add its directory to PATH, or give its full path in `command:`"),
                ));
            }
        }
        if let Some(var) = &spec.bearer_env
            && env(&var.value).is_none()
        {
            out.push((
                var.pos,
                Problem::Machine,
                format!(
                    "MCP server `{}`: the bearer token variable `{}` is not set",
                    spec.name.value, var.value
                ),
                format!("export {}=... before running", var.value),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_cover_named_tools_and_whole_servers() {
        let grant = ["read_file", "fixture__add", "gh__*"];
        assert!(covers(&grant, "fixture__add"));
        assert!(!covers(&grant, "fixture__echo"));
        assert!(covers(&grant, "gh__list_issues"));
        assert!(!covers(&grant, "ghx__list"));
        assert!(!covers(&["*"], "gh__list"));
        assert_eq!(server_of("fixture__add"), Some("fixture"));
        assert_eq!(server_of("read_file"), None);
    }
}
