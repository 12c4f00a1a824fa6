//! One entry of an agent's `tools:` grant: a bare name (`read_file`, `github__*`) or a
//! mapping, which says what kind of tool it is by the key it carries:
//!
//! * `{ builtin: web_fetch, allow: [host] }`: a built-in tool, with its options;
//! * `{ mcp: SERVER }`, with `tool:` or `tools:` to take only some: tools of an MCP server
//!   declared under the top-level `mcp_servers:` (or the agent's own);
//! * `{ name, description, run, required, max_calls, args }`: a custom tool, a command;
//! * `{ agent: NAME, description }`: another agent, called as a tool (delegation).
//!
//! Everything downstream of loading sees the grant as names ([`ToolGrant::names`]); the
//! mapping's options are read where the tool is built.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::at::At;

/// What separates the server from the tool in an MCP tool's name.
pub const SEPARATOR: &str = "__";

/// One tool of a grant.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum ToolGrant {
    /// `read_file`, `run_shell`, `github__search_issues`, `github__*`.
    Name(String),
    /// The mapping form.
    Object(Box<ToolObject>),
}

/// The mapping form of a tool grant. Which of `builtin`, `mcp`, `name` and `agent` is set
/// says what it is ([`ToolObject::kind`]).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolObject {
    /// A built-in tool by name (so options have somewhere to attach).
    #[serde(default)]
    pub builtin: Option<At<String>>,
    /// With `builtin: web_fetch`: the hosts (and their subdomains) it may fetch from.
    #[serde(default)]
    pub allow: Option<Vec<At<String>>>,
    /// An MCP server's tools: every one, or those of `tool:` / `tools:`.
    #[serde(default)]
    pub mcp: Option<At<String>>,
    /// With `mcp:`, the one tool granted.
    #[serde(default)]
    pub tool: Option<At<String>>,
    /// With `mcp:`, the tools granted.
    #[serde(default)]
    pub tools: Option<Vec<At<String>>>,
    /// A custom tool's name, as the model calls it.
    #[serde(default)]
    pub name: Option<At<String>>,
    /// What the model is told the tool does.
    #[serde(default)]
    pub description: Option<String>,
    /// A custom tool's command; `{{ .args.NAME }}` are its parameters.
    #[serde(default)]
    pub run: Option<At<String>>,
    /// A custom tool the step cannot finish without having called successfully.
    #[serde(default)]
    pub required: Option<At<bool>>,
    /// The most calls of a custom tool in one conversation.
    #[serde(default)]
    pub max_calls: Option<At<u32>>,
    /// Arguments of a custom tool the pipeline pins (the model does not see them).
    #[serde(default)]
    pub args: Option<At<BTreeMap<String, serde_json::Value>>>,
    /// The paths (relative to the step directory) a custom tool's command reads or
    /// writes; `[]` for none. Omitted, it may touch anything, and its calls run apart from
    /// every other call of a batch.
    #[serde(default)]
    pub touches: Option<Vec<At<String>>>,
    /// Another agent, called as a tool taking one `request` string.
    #[serde(default)]
    pub agent: Option<At<String>>,
}

/// What a tool mapping is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `builtin:`.
    Builtin,
    /// `mcp:`.
    Mcp,
    /// `name:` with `run:`.
    Custom,
    /// `agent:`.
    Agent,
}

impl ToolKind {
    /// The key that names this kind.
    pub fn key(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Mcp => "mcp",
            Self::Custom => "name",
            Self::Agent => "agent",
        }
    }
}

impl ToolObject {
    /// Its kind, or the keys that clash (none or several of the kind keys).
    pub fn kind(&self) -> Result<ToolKind, Vec<&'static str>> {
        let present: Vec<ToolKind> = [
            (ToolKind::Builtin, self.builtin.is_some()),
            (ToolKind::Mcp, self.mcp.is_some()),
            (ToolKind::Custom, self.name.is_some()),
            (ToolKind::Agent, self.agent.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.then_some(k))
        .collect();
        match present.as_slice() {
            [one] => Ok(*one),
            several => Err(several.iter().map(|k| k.key()).collect()),
        }
    }
}

impl ToolGrant {
    /// The tool names this entry grants (an MCP server's whole set as `SERVER__*`).
    pub fn names(&self) -> Vec<String> {
        let o = match self {
            Self::Name(n) => return vec![n.clone()],
            Self::Object(o) => o,
        };
        match o.kind() {
            Ok(ToolKind::Builtin) => o.builtin.iter().map(|b| b.value.clone()).collect(),
            Ok(ToolKind::Custom) => o.name.iter().map(|n| n.value.clone()).collect(),
            Ok(ToolKind::Agent) => o.agent.iter().map(|a| a.value.clone()).collect(),
            Ok(ToolKind::Mcp) => {
                let server = o.mcp.as_ref().map_or("", |m| m.value.as_str());
                let picked: Vec<&str> = o
                    .tool
                    .iter()
                    .chain(o.tools.iter().flatten())
                    .map(|t| t.value.as_str())
                    .collect();
                if picked.is_empty() {
                    vec![format!("{server}{SEPARATOR}*")]
                } else {
                    picked
                        .into_iter()
                        .map(|t| format!("{server}{SEPARATOR}{t}"))
                        .collect()
                }
            }
            Err(_) => Vec::new(),
        }
    }

    /// The mapping form, if it is one.
    pub fn object(&self) -> Option<&ToolObject> {
        match self {
            Self::Object(o) => Some(o),
            Self::Name(_) => None,
        }
    }
}

// A visitor, not `#[serde(untagged)]`, so errors inside the mapping keep their position.
impl<'de> Deserialize<'de> for ToolGrant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolGrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a tool name, or a mapping with `builtin`, `mcp`, `name` + `run`, or `agent`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolGrant, E> {
                Ok(ToolGrant::Name(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolGrant, A::Error> {
                ToolObject::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|o| ToolGrant::Object(Box::new(o)))
            }
        }
        deserializer.deserialize_any(V)
    }
}
