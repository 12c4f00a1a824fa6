//! What an agent step may be written with but treadle cannot run: a CLI other than claude
//! and codex, and an MCP server with OAuth. Such a step is refused when it is built, with a message naming the
//! key, rather than run without it.

use crate::pipeline::model::{CLI_PROVIDER, ResolvedModel};
use crate::pipeline::{Agent, Step};

/// Why `step` of `agent` cannot run here, if it cannot.
pub fn unsupported(agent: &Agent, _step: &Step, model: &ResolvedModel) -> Option<String> {
    let name = &agent.name.value;
    let driven = ["@claude/", "@codex/"];
    if model.provider == CLI_PROVIDER && !driven.iter().any(|cli| model.model.starts_with(cli)) {
        return Some(format!(
            "agent `{name}` names a CLI-backed model (`{}`) of a CLI treadle does not run; write `@claude/MODEL` or `@codex/MODEL`, or give it a hosted model (`openrouter/NAME`, `local/NAME`...)",
            model.model
        ));
    }
    if let Some(oauth) = agent.mcp_servers.iter().find(|s| {
        s.auth
            .as_ref()
            .is_some_and(|a| a.value.kind.value == "oauth")
    }) {
        return Some(format!(
            "MCP server `{}` uses `auth: {{ type: oauth }}`, which treadle does not do; give it `auth: {{ type: bearer, api_key_env: VAR }}`",
            oauth.name.value
        ));
    }
    None
}
