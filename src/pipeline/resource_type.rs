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

/// How many versions of one resource the state file keeps when `defaults:` does not say.
pub const DEFAULT_VERSION_HISTORY: u32 = 1000;

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

/// `defaults:` at the top of the file.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Versions of each resource kept in the state file, newest kept (default 1000; `0`
    /// keeps every one).
    #[serde(default)]
    pub version_history: Option<At<u32>>,
    /// Runs kept per job. Read so that pipelines written for `steps` load; treadle keeps
    /// every run, and `validate` warns that it has no effect.
    #[serde(default)]
    pub run_history: Option<At<u32>>,
}

impl Defaults {
    /// The version history cap in force (`0`: no cap).
    pub fn version_history(defaults: Option<&Self>) -> u32 {
        defaults
            .and_then(|d| d.version_history.as_ref())
            .map_or(DEFAULT_VERSION_HISTORY, |v| v.value)
    }
}

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
