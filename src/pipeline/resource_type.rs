//! The resource keys of the file format: `resource_types:` (a type written as three shell
//! scripts), `defaults:` (the version history cap), a get's `version:` (which version it
//! fetches) and a put's `inputs: all`.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::at::At;
use super::duration::DurationSpec;

pub use super::defaults::DEFAULT_VERSION_HISTORY;

/// One entry of `resource_types:`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceType {
    /// The name a resource's `type:` uses.
    pub name: At<String>,
    /// The scripts.
    pub config: ResourceTypeConfig,
    /// Kill a script running longer than this (default 10m).
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// A container image to run the scripts in (treadle has no container runtime: a
    /// resource of such a type fails saying so).
    #[serde(default)]
    pub image: Option<At<String>>,
    /// Variables of treadle's environment passed to the type's scripts, by name (never
    /// `NAME=value`); an unset one is left out.
    #[serde(default)]
    pub env: Vec<At<String>>,
    /// With `image:`, the container's network (`docker run --network`).
    #[serde(default)]
    pub network: Option<At<String>>,
    /// With `image:`, run the container privileged.
    #[serde(default)]
    pub privileged: Option<At<bool>>,
    /// With `image:`, the container's user.
    #[serde(default)]
    pub user: Option<At<String>>,
    /// With `image:`, the container's CPU and memory caps.
    #[serde(default)]
    pub container_limits: Option<At<super::container::ContainerLimits>>,
}

impl ResourceType {
    /// The container keys set on the type, with where: `image` first.
    pub fn container_keys(&self) -> Vec<(&'static str, super::at::Pos)> {
        [
            ("image", self.image.as_ref().map(|i| i.pos)),
            ("network", self.network.as_ref().map(|n| n.pos)),
            ("privileged", self.privileged.as_ref().map(|p| p.pos)),
            ("user", self.user.as_ref().map(|u| u.pos)),
            (
                "container_limits",
                self.container_limits.as_ref().map(|c| c.pos),
            ),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.map(|p| (k, p)))
        .collect()
    }
}

/// The scripts of a resource type, each run with `sh -c` after `{{ }}` templating.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceTypeConfig {
    /// Prints a JSON list of versions, oldest first (sees `.source`, `.version`).
    #[serde(default)]
    pub check: Option<At<String>>,
    /// Fills the artifact directory, its working directory, with one version (sees
    /// `.source`, `.version`, `.params`).
    #[serde(default, rename = "in")]
    pub in_: Option<At<String>>,
    /// Publishes from the put's inputs and may print the new version as a JSON object
    /// (sees `.source`, `.params`).
    #[serde(default)]
    pub out: Option<At<String>>,
    /// The stages written as expressions instead of shell (see `treadle docs resources`).
    #[serde(default)]
    pub expr: Option<At<ExprConfig>>,
    /// The stages as calls of an MCP server's tools.
    #[serde(default)]
    pub mcp: Option<At<McpConfig>>,
}

/// `config.expr:`: each stage an expression, inline or read from a `*_file:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExprConfig {
    /// Returns the versions, oldest first (sees `source`, `version`).
    #[serde(default)]
    pub check: Option<At<String>>,
    /// Returns a map of artifact-relative path to file contents.
    #[serde(default, rename = "in")]
    pub in_: Option<At<String>>,
    /// Returns the version it published, or `nil`.
    #[serde(default)]
    pub out: Option<At<String>>,
    /// `check` read from this file (relative to the pipeline file).
    #[serde(default)]
    pub check_file: Option<At<String>>,
    /// `in` read from this file.
    #[serde(default)]
    pub in_file: Option<At<String>>,
    /// `out` read from this file.
    #[serde(default)]
    pub out_file: Option<At<String>>,
}

/// `config.mcp:`: the stages as tool calls of one `mcp_servers:` entry.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The `mcp_servers:` entry.
    pub server: At<String>,
    /// Called with the resource's `source:` (or `args:`); returns the versions.
    #[serde(default)]
    pub check: Option<McpCall>,
    /// Called for a get; without it a get writes `version.json` only.
    #[serde(default, rename = "in")]
    pub in_: Option<McpCall>,
    /// Called by a put with its `params:` (or `args:`).
    #[serde(default)]
    pub out: Option<McpCall>,
}

/// One stage of an MCP-backed type: a tool and, optionally, its argument object (each
/// string in it a template).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpCall {
    /// The tool's name on the server.
    pub tool: At<String>,
    /// The arguments, replacing the default payload.
    #[serde(default)]
    pub args: Option<BTreeMap<String, serde_json::Value>>,
}

/// How a type's stages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `check:`/`in:`/`out:` shell scripts.
    Shell,
    /// `expr:`.
    Expr,
    /// `mcp:`.
    Mcp,
}

impl ResourceTypeConfig {
    /// The backend the type is written in (the first of `mcp`, `expr`, shell).
    pub fn backend(&self) -> Backend {
        if self.mcp.is_some() {
            Backend::Mcp
        } else if self.expr.is_some() {
            Backend::Expr
        } else {
            Backend::Shell
        }
    }

    /// Which stages the type has: (`check`, `in`, `out`). A type without `in` still
    /// gets (the get writes `version.json`), so `in` always counts as there.
    pub fn stages(&self) -> (bool, bool, bool) {
        match (&self.expr, &self.mcp) {
            (_, Some(m)) => (m.value.check.is_some(), true, m.value.out.is_some()),
            (Some(e), None) => (
                e.value.check.is_some() || e.value.check_file.is_some(),
                true,
                e.value.out.is_some() || e.value.out_file.is_some(),
            ),
            (None, None) => (self.check.is_some(), true, self.out.is_some()),
        }
    }
}

/// `defaults:` at the top of the file (its keys besides `version_history:` are the
/// agents'; one type, in `defaults`).
pub use super::defaults::Defaults;

/// A version of a resource: a flat map of strings, as a check prints it.
pub type Version = BTreeMap<String, String>;

/// `version:` on a get: which of the recorded versions it fetches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, JsonSchema)]
#[schemars(untagged)]
pub enum VersionSpec {
    /// `latest` (the default): the newest version the check reported.
    #[default]
    Latest,
    /// `every`: each version in turn, each taken once per job.
    Every,
    /// `{ key: value }`: exactly this version.
    Pinned(Version),
}

impl<'de> Deserialize<'de> for VersionSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VersionSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`latest`, `every`, or a mapping of version keys to strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<VersionSpec, E> {
                match v {
                    "latest" => Ok(VersionSpec::Latest),
                    "every" => Ok(VersionSpec::Every),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VersionSpec, A::Error> {
                let mut out = Version::new();
                while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                    let text = match v {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Number(n) => n.to_string(),
                        serde_json::Value::Bool(b) => b.to_string(),
                        _ => {
                            return Err(de::Error::custom(format!(
                                "version key `{k}` must be a string"
                            )));
                        }
                    };
                    out.insert(k, text);
                }
                Ok(VersionSpec::Pinned(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// How `inputs: all` (every artifact produced so far; a put's only) is held in a step's
/// `inputs:`: one entry no artifact can be named (names are checked as paths).
pub const ALL_INPUTS: &str = "*";

/// Reads `inputs:`: a list of artifact names, or `all` (kept as [`ALL_INPUTS`], with its
/// place in the file).
pub fn inputs_or_all<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<At<String>>, D::Error> {
    enum Raw {
        All,
        List(Vec<At<String>>),
    }
    impl<'de> Deserialize<'de> for Raw {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Raw;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a list of artifact names, or `all` (on a put)")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
                    match v {
                        "all" => Ok(Raw::All),
                        other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                    }
                }
                fn visit_unit<E: de::Error>(self) -> Result<Raw, E> {
                    Ok(Raw::List(Vec::new()))
                }
                fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                    let mut out = Vec::new();
                    while let Some(item) = seq.next_element::<At<String>>()? {
                        out.push(item);
                    }
                    Ok(Raw::List(out))
                }
            }
            d.deserialize_any(V)
        }
    }
    let raw = At::<Raw>::deserialize(d)?;
    Ok(match raw.value {
        Raw::All => vec![At {
            value: ALL_INPUTS.to_owned(),
            pos: raw.pos,
        }],
        Raw::List(v) => v,
    })
}
