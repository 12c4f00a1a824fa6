//! One entry of an agent's `tools:` grant, typed when the file is parsed: a bare name
//! (`read_file`, `github__*`) or a mapping, which says what kind of tool it is by the key
//! it carries:
//!
//! * `{ builtin: web_fetch, allow: [host] }`: a built-in tool, with its options;
//! * `{ mcp: SERVER }`, with `tool:` or `tools:` to take only some: tools of an MCP server
//!   declared under the top-level `mcp_servers:` (or the agent's own);
//! * `{ name, description, run, required, max_calls, args }`: a custom tool, a command;
//! * `{ agent: NAME, description }`: another agent, called as a tool (delegation).
//!
//! The mapping is read as written ([`ToolObject`]) and sorted at once into its
//! [`ToolGrant`] variant; a mapping with none or several kind keys becomes
//! [`ToolGrant::Unclear`], which the checks report with the agent's name (loading fails on
//! it), and keys of another kind are kept as [`Stray`]s for the same report. After loading,
//! code matches the variant and never asks what a grant is.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::at::At;

/// What separates the server from the tool in an MCP tool's name.
pub const SEPARATOR: &str = "__";

/// One tool of a grant.
#[derive(Debug, Clone)]
pub enum ToolGrant {
    /// `read_file`, `run_shell`, `github__search_issues`, `github__*`.
    Name(String),
    /// `builtin:`.
    Builtin(BuiltinGrant),
    /// `mcp:`.
    Mcp(McpGrant),
    /// `name:` (with `run:`).
    Custom(Box<CustomGrant>),
    /// `agent:`.
    Agent(AgentGrant),
    /// A mapping with none or several of the kind keys (those it has, in the order
    /// `builtin`, `mcp`, `name`, `agent`): loading reports it and fails.
    Unclear(Vec<&'static str>),
}

/// `{ builtin: NAME, allow: [host] }`.
#[derive(Debug, Clone)]
pub struct BuiltinGrant {
    /// The built-in tool.
    pub name: At<String>,
    /// With `web_fetch`: the hosts (and their subdomains) it may fetch from.
    pub allow: Vec<At<String>>,
    /// Keys written here that belong to another kind.
    pub strays: Vec<Stray>,
}

/// `{ mcp: SERVER, tool: T }` or `{ mcp: SERVER, tools: [T] }`.
#[derive(Debug, Clone)]
pub struct McpGrant {
    /// The server, by its name under `mcp_servers:`.
    pub server: At<String>,
    /// The tools taken (`tool:` then `tools:`); empty for every tool of the server.
    pub tools: Vec<At<String>>,
    /// `max_calls:`: the most calls of the one tool granted in one conversation (the
    /// checks refuse it with several tools, or the whole server).
    pub max_calls: Option<At<u32>>,
    /// Keys written here that belong to another kind.
    pub strays: Vec<Stray>,
}

/// `{ name, description, run, required, max_calls, args, touches }`: a command.
#[derive(Debug, Clone)]
pub struct CustomGrant {
    /// The name the model calls it by.
    pub name: At<String>,
    /// What the model is told the tool does.
    pub description: Option<String>,
    /// The command; `{{ .args.NAME }}` are its parameters (`None` is reported at load).
    pub run: Option<At<String>>,
    /// The step cannot finish without having called it successfully.
    pub required: bool,
    /// The most calls in one conversation.
    pub max_calls: Option<u32>,
    /// Arguments the pipeline pins (the model does not see them).
    pub args: BTreeMap<String, serde_json::Value>,
    /// The paths (relative to the step directory) it reads or writes; `None`: anything.
    pub touches: Option<Vec<String>>,
    /// Keys written here that belong to another kind.
    pub strays: Vec<Stray>,
}

/// `{ agent: NAME, description }`: another agent called as a tool.
#[derive(Debug, Clone)]
pub struct AgentGrant {
    /// The agent, by its name under `agents:`.
    pub agent: At<String>,
    /// What the parent's model is told the sub-agent does.
    pub description: Option<String>,
    /// Keys written here that belong to another kind.
    pub strays: Vec<Stray>,
}

/// A key of a tool mapping that belongs to another kind of tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stray {
    /// The key, as written.
    pub key: &'static str,
    /// The kinds it belongs to, for the report.
    pub belongs_to: &'static str,
}

/// The mapping form of a tool grant. Which of `builtin`, `mcp`, `name` and `agent` is set
/// says what it is: [`ToolGrant::from`] sorts it into its variant.
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

/// The four kinds of a tool mapping, by the key that names them.
const KINDS: [&str; 4] = ["builtin", "mcp", "name", "agent"];

impl From<ToolObject> for ToolGrant {
    /// Sorts a mapping by its kind key (exactly one of `builtin`, `mcp`, `name`, `agent`).
    fn from(o: ToolObject) -> Self {
        let strays = o.strays();
        let present = [
            o.builtin.is_some(),
            o.mcp.is_some(),
            o.name.is_some(),
            o.agent.is_some(),
        ];
        let ToolObject {
            builtin,
            allow,
            mcp,
            tool,
            tools,
            name,
            description,
            run,
            required,
            max_calls,
            args,
            touches,
            agent,
        } = o;
        match (builtin, mcp, name, agent) {
            (Some(name), None, None, None) => Self::Builtin(BuiltinGrant {
                name,
                allow: allow.unwrap_or_default(),
                strays,
            }),
            (None, Some(server), None, None) => Self::Mcp(McpGrant {
                server,
                tools: tool
                    .into_iter()
                    .chain(tools.into_iter().flatten())
                    .collect(),
                max_calls,
                strays,
            }),
            (None, None, Some(name), None) => Self::Custom(Box::new(CustomGrant {
                name,
                description,
                run,
                required: required.is_some_and(|r| r.value),
                max_calls: max_calls.map(|m| m.value),
                args: args.map(|a| a.value).unwrap_or_default(),
                touches: touches.map(|paths| paths.into_iter().map(|p| p.value).collect()),
                strays,
            })),
            (None, None, None, Some(agent)) => Self::Agent(AgentGrant {
                agent,
                description,
                strays,
            }),
            _ => Self::Unclear(
                KINDS
                    .into_iter()
                    .zip(present)
                    .filter_map(|(k, p)| p.then_some(k))
                    .collect(),
            ),
        }
    }
}

impl ToolObject {
    /// The keys written that do not belong to the mapping's kind, in a fixed order (one
    /// rule: which key belongs to which kind lives here).
    fn strays(&self) -> Vec<Stray> {
        const CUSTOM: &str = "custom (`run:`) tools";
        let custom = self.name.is_some();
        let mcp = self.mcp.is_some();
        let fetch = self
            .builtin
            .as_ref()
            .is_some_and(|b| b.value == "web_fetch");
        [
            (!custom && self.required.is_some(), "required", CUSTOM),
            (!custom && self.args.is_some(), "args", CUSTOM),
            (!custom && self.touches.is_some(), "touches", CUSTOM),
            (
                !custom && !mcp && self.max_calls.is_some(),
                "max_calls",
                "custom and MCP tools",
            ),
            (
                !custom && self.run.is_some(),
                "run",
                "custom tools (with `name:`)",
            ),
            (
                !mcp && (self.tool.is_some() || self.tools.is_some()),
                "tool",
                "MCP tools (with `mcp:`)",
            ),
            (
                !fetch && self.allow.is_some(),
                "allow",
                "`builtin: web_fetch`",
            ),
        ]
        .into_iter()
        .filter_map(|(stray, key, belongs_to)| stray.then_some(Stray { key, belongs_to }))
        .collect()
    }
}

impl ToolGrant {
    /// The tool names this entry grants (an MCP server's whole set as `SERVER__*`).
    pub fn names(&self) -> Vec<String> {
        match self {
            Self::Name(n) => vec![n.clone()],
            Self::Builtin(b) => vec![b.name.value.clone()],
            Self::Custom(c) => vec![c.name.value.clone()],
            Self::Agent(a) => vec![a.agent.value.clone()],
            Self::Mcp(m) => {
                let server = &m.server.value;
                if m.tools.is_empty() {
                    vec![format!("{server}{SEPARATOR}*")]
                } else {
                    m.tools
                        .iter()
                        .map(|t| format!("{server}{SEPARATOR}{}", t.value))
                        .collect()
                }
            }
            Self::Unclear(_) => Vec::new(),
        }
    }

    /// The keys written that belong to another kind of tool.
    pub fn strays(&self) -> &[Stray] {
        match self {
            Self::Builtin(b) => &b.strays,
            Self::Mcp(m) => &m.strays,
            Self::Custom(c) => &c.strays,
            Self::Agent(a) => &a.strays,
            Self::Name(_) | Self::Unclear(_) => &[],
        }
    }

    /// Whether the name is one to check against the built-in and MCP tools (a custom tool
    /// or a sub-agent names itself).
    pub fn is_named_tool(&self) -> bool {
        matches!(self, Self::Name(_) | Self::Builtin(_) | Self::Mcp(_))
    }
}

// How a grant is written; only its schema is used (what `treadle schema` shows).
/// One tool of a grant: a name, or the mapping form.
#[derive(JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)] // Only its schema is used.
enum Written {
    /// `read_file`, `run_shell`, `github__search_issues`, `github__*`.
    Name(String),
    /// The mapping form.
    Object(Box<ToolObject>),
}

impl JsonSchema for ToolGrant {
    fn schema_name() -> Cow<'static, str> {
        "ToolGrant".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Written::json_schema(generator)
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
                    .map(ToolGrant::from)
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<At<String>> {
        Some(At::new(s.to_owned()))
    }

    #[test]
    fn a_mapping_is_sorted_by_its_one_kind_key() {
        let mcp = ToolGrant::from(ToolObject {
            mcp: at("github"),
            tool: at("search"),
            tools: Some(vec![At::new("read".to_owned())]),
            ..ToolObject::default()
        });
        assert!(matches!(&mcp, ToolGrant::Mcp(m) if m.strays.is_empty()));
        assert_eq!(mcp.names(), ["github__search", "github__read"]);
        let custom = ToolGrant::from(ToolObject {
            name: at("lint"),
            run: at("make lint"),
            required: Some(At::new(true)),
            ..ToolObject::default()
        });
        assert!(matches!(&custom, ToolGrant::Custom(c) if c.required && c.strays.is_empty()));
    }

    #[test]
    fn none_or_several_kind_keys_are_unclear_with_the_keys_found() {
        let none = ToolGrant::from(ToolObject::default());
        assert!(matches!(&none, ToolGrant::Unclear(k) if k.is_empty()));
        let both = ToolGrant::from(ToolObject {
            agent: at("helper"),
            builtin: at("read_file"),
            ..ToolObject::default()
        });
        assert!(matches!(&both, ToolGrant::Unclear(k) if k == &["builtin", "agent"]));
        assert!(both.names().is_empty());
    }

    #[test]
    fn keys_of_another_kind_are_strays() {
        let fetch_elsewhere = ToolGrant::from(ToolObject {
            builtin: at("read_file"),
            allow: Some(vec![At::new("example.com".to_owned())]),
            run: at("true"),
            ..ToolObject::default()
        });
        let keys: Vec<&str> = fetch_elsewhere.strays().iter().map(|s| s.key).collect();
        assert_eq!(keys, ["run", "allow"]);
        let fetch = ToolGrant::from(ToolObject {
            builtin: at("web_fetch"),
            allow: Some(vec![At::new("example.com".to_owned())]),
            ..ToolObject::default()
        });
        assert!(fetch.strays().is_empty());
    }
}
