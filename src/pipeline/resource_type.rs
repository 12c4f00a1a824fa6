//! The resource keys of the file format: `resource_types:` (a type written as three shell
//! scripts), `defaults:` (the version history cap) and a get's `version:` (which version
//! it fetches).

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
