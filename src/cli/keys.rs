//! The API-key variables a command line will read, named before any thread starts so
//! that `main` can take them out of the process environment (see `crate::environ`).

use std::path::Path;

use super::{Cli, Command};
use crate::pipeline::walk::used_agents;
use crate::pipeline::{load, model};

/// The providers' own key variables, taken whatever the pipeline says.
pub const PROVIDER_KEYS: &[&str] = &["OPENAI_API_KEY", "OPENROUTER_API_KEY"];

/// Every key variable the command's pipeline names (`api_key_env:` or a provider's
/// default, an MCP server's `bearer_env:`), plus [`PROVIDER_KEYS`]. A pipeline that does not load names none here; the
/// command reports its errors later.
pub fn key_vars(cli: &Cli) -> Vec<String> {
    let mut names: Vec<String> = PROVIDER_KEYS.iter().map(|s| (*s).to_owned()).collect();
    if let Some(file) = pipeline_file(&cli.command)
        && let Ok(pipeline) = load::read(file)
    {
        for (agent, resolved) in used_agents(&pipeline, None, &model::process_env) {
            names.extend(resolved.ok().and_then(|m| m.api_key_env));
            // MCP servers' bearer tokens are keys too.
            names.extend(
                agent
                    .mcp_servers
                    .iter()
                    .filter_map(|s| s.bearer_env.as_ref().map(|v| v.value.clone())),
            );
        }
    }
    names
}

/// The pipeline file of the commands that may run or check agents.
fn pipeline_file(command: &Command) -> Option<&Path> {
    match command {
        Command::Run { file, .. }
        | Command::Validate { file, .. }
        | Command::Plan { file, .. }
        | Command::Test { file, .. } => Some(file),
        _ => None,
    }
}
