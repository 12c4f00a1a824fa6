//! The variables that hold a pipeline's secrets, and their values: every key any agent of
//! the file could use, whether a job uses that agent or not.
//!
//! A secret variable is named by an entry of `agents:` (its `api_key_env:`, or its
//! provider's default key), by any of its `fallback:` sources, by an MCP server's
//! `bearer_env:` (or `auth: { api_key_env, client_secret_env }`), top-level or an agent's,
//! or is one of [`PROVIDER_KEYS`]. Sub-agents are entries of `agents:` too. The set does not
//! depend on the job being run: a key is a secret for every job of the file, so no task of
//! any job gets it through `pass_env:` and nothing treadle writes shows it.

use std::collections::BTreeSet;

use super::agent_def::{AgentSource, McpServerSpec};
use super::at::Pos;
use super::format::Pipeline;

/// The providers' own key variables: secrets whatever the pipeline says.
pub const PROVIDER_KEYS: &[&str] = &["OPENAI_API_KEY", "OPENROUTER_API_KEY"];

/// Every variable holding a secret of `pipeline` (see the module's documentation).
///
/// ```
/// use treadle::pipeline::{load, secrets};
/// let yaml = "agents:\n  - name: unused\n    source: { model: openai/gpt-4o, api_key_env: MY_KEY }\n\
///             plan:\n  - task: t\n    run: 'true'\n";
/// let pipeline = load::parse(std::path::Path::new("treadle.yml"), yaml).unwrap();
/// assert!(secrets::key_vars(&pipeline).contains("MY_KEY"));
/// ```
pub fn key_vars<S>(pipeline: &Pipeline<S>) -> BTreeSet<String> {
    let mut vars: BTreeSet<String> = PROVIDER_KEYS.iter().map(|s| (*s).to_owned()).collect();
    for agent in &pipeline.agents {
        vars.extend(source_key(&agent.source));
        for fallback in &agent.fallback {
            vars.extend(source_key(&fallback.value.source));
        }
        for server in &agent.mcp_servers {
            vars.extend(server_keys(server));
        }
    }
    for server in &pipeline.mcp_servers {
        vars.extend(server_keys(server));
    }
    vars
}

/// The values of `pipeline`'s secret variables that are set (read through
/// `crate::environ::var`, so keys taken out of the environment at start-up are found).
pub fn values(pipeline: &Pipeline) -> Vec<String> {
    key_vars(pipeline)
        .iter()
        .filter_map(|var| crate::environ::var(var))
        .collect()
}

/// The key variable of one source: as written, or its provider's default. A source that
/// does not resolve names no default (the load reports it).
fn source_key(source: &AgentSource) -> Option<String> {
    let no_env = |_: &str| None;
    super::model::resolve(source, Pos::default(), &no_env)
        .ok()
        .and_then(|m| m.api_key_env)
        .or_else(|| source.api_key_env.as_ref().map(|k| k.value.clone()))
}

/// The token variables of an MCP server.
fn server_keys(server: &McpServerSpec) -> impl Iterator<Item = String> + '_ {
    let auth = server.auth.as_ref().map(|a| &a.value);
    server
        .bearer_env
        .iter()
        .chain(auth.and_then(|a| a.api_key_env.as_ref()))
        .chain(auth.and_then(|a| a.client_secret_env.as_ref()))
        .map(|v| v.value.clone())
}
