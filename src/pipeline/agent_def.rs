//! The agent definitions of a pipeline file (`agents:`): the model, its tools and dials,
//! MCP servers, and token budgets (split from `format` so agent keys grow here).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::at::At;
use super::tool_grant::{AgentGrant, ToolGrant};

/// An agent: a model and what it may do.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Name `agent:` steps refer to.
    pub name: At<String>,
    /// Which model serves the agent; empty means the local model server.
    #[serde(default)]
    pub source: AgentSource,
    /// System prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Tools the agent is granted; the default grant is read-only
    /// (`read_file`, `list_dir`, `search_files`).
    #[serde(default)]
    pub tools: Option<Vec<At<ToolGrant>>>,
    /// The sub-agents of `tools:` (`{ agent: NAME }`), each resolved to an agent of the
    /// same pipeline when it is loaded ([`super::delegation::resolve`]); not written in
    /// the file.
    #[serde(skip)]
    pub delegations: Vec<Delegation>,
    /// Upper bound on model requests in one step.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Sampling temperature (0 for the most repeatable answers); the server's default
    /// when left out.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Token budget for one step of this agent.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// MCP servers whose tools the grant may name, as `{server}__{tool}` or `{server}__*`.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerSpec>,
    /// Limits on the model traffic of one step (see `treadle docs limits`).
    #[serde(default)]
    pub limits: Option<super::settings::AgentLimits>,
    /// The model's context window in tokens: the conversation is compacted at 80% of it.
    /// Default: 8192 for the local model server, else 128000.
    #[serde(default)]
    pub context_window: Option<At<u64>>,
    /// Compact the conversation once its estimated size passes this many tokens (wins
    /// over `context_window:`); `0` never compacts.
    #[serde(default)]
    pub compact_after_tokens: Option<u64>,
    /// The most bytes of one tool result put into the conversation (`32KB`, `100000`);
    /// `0` or left out: no cap.
    #[serde(default)]
    pub max_context_bytes: Option<super::settings::SizeSpec>,
    /// Rules on the agent's tool calls: allow, deny, or ask a person (`treadle docs agent-controls`).
    #[serde(default)]
    #[schemars(with = "Option<super::controls::PermissionsSchema>")]
    pub permissions: Option<At<treadle_hook::Policy>>,
    /// What the agent does, in a line: what a parent sees when it is granted as a tool.
    #[serde(default)]
    pub description: Option<String>,
    /// The system prompt read from this file (relative to the pipeline file) at load.
    #[serde(default)]
    pub system_file: Option<At<String>>,
    /// A YAML file holding the agent's definition; keys written here win over its own.
    #[serde(default)]
    pub file: Option<At<String>>,
    /// Nucleus sampling (0 to 1); the server's default when left out.
    #[serde(default)]
    pub top_p: Option<At<f32>>,
    /// The most tokens one model response may have.
    #[serde(default)]
    pub max_tokens: Option<At<u32>>,
    /// `low`, `medium` or `high`, for models that take a reasoning effort.
    #[serde(default)]
    pub reasoning_effort: Option<At<String>>,
    /// The share (percent, 1 to 100) of what is left of this agent's budget that one call
    /// of a sub-agent may spend.
    #[serde(default)]
    pub delegate_budget_percent: Option<At<u32>>,
    /// `false`: the pre-run check does not probe this agent's model.
    #[serde(default)]
    pub preflight: Option<bool>,
    /// Other sources, tried in order when this one's model cannot be reached.
    #[serde(default)]
    pub fallback: Vec<At<Fallback>>,
    /// For a CLI-backed model (`@cli/model`): `project` loads the repository's own CLI
    /// settings.
    #[serde(default)]
    pub settings: Option<At<String>>,
    /// The default `timeout:` of this agent's steps (a step's own wins).
    #[serde(default)]
    pub timeout: Option<At<super::duration::DurationSpec>>,
    /// The default `attempts:` of this agent's steps (a step's own wins).
    #[serde(default)]
    pub attempts: Option<At<u32>>,
    /// The container image the agent's tools run in (see `image:` on steps).
    #[serde(default)]
    pub image: Option<At<String>>,
    /// What the agent's `run_shell` commands may connect to (see `network:` on steps);
    /// a step's own wins.
    #[serde(default)]
    pub network: Option<At<super::network::Network>>,
    /// With `image:`, the user the tools run as.
    #[serde(default)]
    pub user: Option<At<String>>,
    /// With `image:`, run the container privileged.
    #[serde(default)]
    pub privileged: Option<At<bool>>,
    /// With `image:`, the container's CPU and memory caps.
    #[serde(default)]
    pub container_limits: Option<At<super::container::ContainerLimits>>,
    /// Variables of treadle's environment its `run_shell` commands get, by name (a step
    /// that names its own `env:` list replaces these).
    #[serde(default)]
    pub env: Vec<At<String>>,
    /// Commands run on the agent's operations (`treadle docs hooks`), after those of `defaults:`.
    #[serde(default)]
    pub hooks: Option<super::hook_def::Hooks>,
}

impl Agent {
    /// The tools granted, as names (an MCP server's whole set as `SERVER__*`), each at the
    /// position of the entry that grants it; `None` when `tools:` is left out.
    pub fn grant(&self) -> Option<Vec<At<String>>> {
        self.tools.as_ref().map(|tools| {
            tools
                .iter()
                .flat_map(|t| {
                    t.value.names().into_iter().map(move |n| At {
                        value: n,
                        pos: t.pos,
                    })
                })
                .collect()
        })
    }

    /// The entries of the grant, each at its position.
    pub fn grants(&self) -> impl Iterator<Item = (&ToolGrant, super::at::Pos)> {
        self.tools.iter().flatten().map(|t| (&t.value, t.pos))
    }

    /// The agents granted as tools (`{ agent: NAME }`).
    pub fn delegates(&self) -> impl Iterator<Item = &AgentGrant> {
        self.grants().filter_map(|(g, _)| match g {
            ToolGrant::Agent(a) => Some(a),
            _ => None,
        })
    }
}

/// One entry of `fallback:`: another source of the same agent.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// Where the fallback model is served.
    pub source: AgentSource,
}

/// One MCP server of an agent: a local command speaking MCP on stdio (`command:`), or a
/// streamable HTTP endpoint (`endpoint:`). Started when an agent step begins, stopped when
/// it ends.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// The prefix of the server's tool names (`NAME__tool`): letters, digits, `-`, `_`.
    pub name: At<String>,
    /// The program to run (looked up in PATH unless it is a path).
    #[serde(default)]
    pub command: Option<At<String>>,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the program's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP URL, such as `http://127.0.0.1:8000/mcp`.
    #[serde(default)]
    pub endpoint: Option<At<String>>,
    /// Name of the environment variable holding a bearer token for `endpoint:`.
    #[serde(default)]
    pub bearer_env: Option<At<String>>,
    /// What the server's tools do to the world, by tool name (`pure`, `idempotent`,
    /// `effectful`); a tool not listed is effectful (see `treadle docs effects`).
    #[serde(default)]
    pub effects: BTreeMap<String, treadle_session::Effect>,
    /// What the server's tools touch, by tool name: the names of the things a tool reads or
    /// writes (a table, a file), `[]` for nothing. Calls naming the same thing run in call
    /// order; a tool not listed may touch anything, and its calls run apart from the rest.
    #[serde(default)]
    pub touches: BTreeMap<String, Vec<String>>,
    /// With `command:`, its working directory, relative to the step directory.
    #[serde(default)]
    pub cwd: Option<At<String>>,
    /// How to authenticate to `endpoint:` (`{ type: bearer, api_key_env }`, `{ type: oauth }`).
    #[serde(default)]
    pub auth: Option<At<McpAuth>>,
}

/// `auth:` of an MCP server.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpAuth {
    /// `bearer` or `oauth`.
    #[serde(rename = "type")]
    pub kind: At<String>,
    /// With `bearer`: the variable holding the token.
    #[serde(default)]
    pub api_key_env: Option<At<String>>,
    /// With `oauth`: the app's public identifier.
    #[serde(default)]
    pub client_id: Option<String>,
    /// With `oauth`: the variable holding the app's secret.
    #[serde(default)]
    pub client_secret_env: Option<At<String>>,
    /// With `oauth`: the local port of the redirect.
    #[serde(default)]
    pub callback_port: Option<At<u16>>,
}

/// Where an agent's model is served.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSource {
    /// `provider/model`: `openai/gpt-4o-mini`, `openrouter/qwen/qwen3-coder`, `local/NAME`.
    /// Left out: the local model server.
    #[serde(default)]
    pub model: Option<At<String>>,
    /// An OpenAI-compatible base URL; it wins over the provider's default.
    #[serde(default)]
    pub endpoint: Option<At<String>>,
    /// Name of the environment variable holding the API key (never the key itself).
    #[serde(default)]
    pub api_key_env: Option<At<String>>,
    /// Send a forced tool choice as the string `"required"` instead of naming the tool, for
    /// servers that refuse the named form. Left out: the string form for `lmstudio/` and
    /// `ollama/` models, the named form otherwise (steps' rule).
    #[serde(default)]
    pub string_tool_choice: Option<At<bool>>,
}

/// A spending limit.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Total tokens (prompt + completion) after which no further model call is made.
    #[serde(default)]
    pub tokens: Option<u64>,
    /// US dollars (at the pipeline's `prices:`) after which no further model call is made
    /// (`usd:`, the spelling of `steps`, is read as this).
    #[serde(default, alias = "usd")]
    pub dollars: Option<f64>,
    /// On an `across:` block only: the tokens admission charges a cell that has not
    /// reported what it spent yet, so the ceiling binds however many cells run at once.
    #[serde(default, skip_serializing)]
    pub reserve_per_cell: Option<At<u64>>,
}

/// An agent of the pipeline [`super::delegation::resolve`] was given, by its place in
/// `agents:`. Only that function makes one (the index is private to the `pipeline`
/// module), so that it always points at an agent of that list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentRef(pub(super) usize);

/// One `{ agent: NAME }` grant with the agent it names.
#[derive(Debug, Clone)]
pub struct Delegation {
    /// The grant as written (the name, which the parent's model calls, and `description:`).
    pub grant: AgentGrant,
    /// The agent it calls.
    pub agent: AgentRef,
}

impl Delegation {
    /// The name the parent's model calls the sub-agent by (the agent's name).
    pub fn name(&self) -> &str {
        &self.grant.agent.value
    }
}
