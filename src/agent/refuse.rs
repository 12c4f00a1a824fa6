//! What an agent step may be written with but treadle cannot run (yet): such a step is
//! refused when it is built, with a message naming the key, rather than run without it.

use crate::pipeline::model::{CLI_PROVIDER, ResolvedModel};
use crate::pipeline::tool_grant::ToolKind;
use crate::pipeline::{Agent, Step};

/// Why `step` of `agent` cannot run here, if it cannot.
pub fn unsupported(agent: &Agent, step: &Step, model: &ResolvedModel) -> Option<String> {
    let name = &agent.name.value;
    if model.provider == CLI_PROVIDER {
        return Some(format!(
            "agent `{name}` names a CLI-backed model (`{}`), which treadle cannot run; give it a hosted model (`openrouter/NAME`, `local/NAME`...)",
            model.model
        ));
    }
    if agent
        .grant()
        .into_iter()
        .flatten()
        .any(|t| t.value == crate::pipeline::check::NOT_BUILT_YET)
    {
        return Some(format!(
            "agent `{name}` is granted `{}`, which treadle does not have yet; remove it from `tools:`",
            crate::pipeline::check::NOT_BUILT_YET
        ));
    }
    for (tool, _) in agent.tool_objects() {
        let what = match tool.kind() {
            Ok(ToolKind::Custom) => tool
                .name
                .as_ref()
                .map(|n| format!("custom tool `{}`", n.value)),
            Ok(ToolKind::Agent) => tool
                .agent
                .as_ref()
                .map(|a| format!("agent tool `{}` (delegation)", a.value)),
            Ok(ToolKind::Builtin) => tool
                .builtin
                .as_ref()
                .filter(|b| !crate::tools::is_builtin(&b.value))
                .map(|b| format!("built-in tool `{}`", b.value)),
            _ => None,
        };
        if let Some(what) = what {
            return Some(format!(
                "agent `{name}` is granted {what}, which treadle does not run yet; remove it from `tools:`"
            ));
        }
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
    if step.context.is_some() {
        return Some(format!(
            "step `{}` asks for `context: {{ from }}`, which treadle does not deliver yet; remove it",
            step.display_name()
        ));
    }
    None
}
