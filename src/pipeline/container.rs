//! Container keys of a step (`image:`, `network:`, `privileged:`, `user:`,
//! `container_limits:`), the step's `env:` in both spellings, and the top-level
//! `workspace:` tuning: their types (their checks are in [`super::check_container`]).
//!
//! treadle runs commands on this machine; it has no container runtime of its own. These keys
//! load and are checked so a pipeline written for `steps` validates, `validate` warns about
//! each step that needs a container, and such a step fails with an error saying so.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::at::At;

/// `container_limits:` caps of a step's container.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerLimits {
    /// CPU share weight (`--cpu-shares`; 1024 is a default container's share).
    #[serde(default)]
    pub cpu: Option<u64>,
    /// Memory cap in bytes (`--memory`).
    #[serde(default)]
    pub memory: Option<u64>,
}

/// A step's container: `image:` and the keys that only mean something beside it. Made
/// when the step is typed, so a `privileged:`, `user:` or `container_limits:` without an
/// image is a load error, not a value to check later.
#[derive(Debug, Clone)]
pub struct Container {
    /// The image the step's commands need (treadle has no container runtime: such a step
    /// fails saying so, and `validate` warns).
    pub image: At<String>,
    /// Run the container privileged.
    pub privileged: Option<At<bool>>,
    /// The user the container's commands run as.
    pub user: Option<At<String>>,
    /// The container's CPU share and memory cap.
    pub limits: Option<At<ContainerLimits>>,
}

/// A step's `env:`: variables with values (`{ NAME: value }`), or, as `steps` writes it,
/// a list of names of treadle's own variables to pass through (the same as `pass_env:`).
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum Env {
    /// `env: { COLOR: blue }`.
    Map(BTreeMap<String, String>),
    /// `env: [BUILD_TAG]`: moved into `pass_env` when the file is loaded.
    Names(Vec<String>),
}

impl Default for Env {
    fn default() -> Self {
        Self::Map(BTreeMap::new())
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

impl std::ops::Deref for Env {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &BTreeMap<String, String> {
        match self {
            Self::Map(m) => m,
            Self::Names(_) => &EMPTY,
        }
    }
}

impl Serialize for Env {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        std::ops::Deref::deref(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Env {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Env;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of NAME: value, or a list of variable names to pass through")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Env, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Env::Names)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Env, A::Error> {
                BTreeMap::deserialize(de::value::MapAccessDeserializer::new(map)).map(Env::Map)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The top-level `workspace:` block: how step directories are materialized.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// `copy` (the default, and the only one treadle has) or `btrfs`.
    #[serde(default)]
    pub strategy: Option<At<String>>,
    /// Where step directories live (treadle keeps them under `.treadle/runs/`).
    #[serde(default)]
    pub root: Option<String>,
    /// Strategy options (btrfs: `compression`).
    #[serde(default)]
    pub options: BTreeMap<String, serde_json::Value>,
    /// The cross-build resource cache (`resources:`, `max_entries:`).
    #[serde(default)]
    pub cache: Option<BTreeMap<String, serde_json::Value>>,
}

/// Why a step with `image:` cannot run here.
pub fn no_runtime(image: &str) -> String {
    format!(
        "this step needs a container runtime (`image: {image}`), and treadle runs commands on this machine only; remove `image:` to run it here"
    )
}

/// Why a `workspace:` block cannot be honoured here, if it cannot.
pub fn unsupported(w: &WorkspaceConfig) -> Option<String> {
    match &w.strategy {
        Some(s) if s.value == "btrfs" => Some(
            "`workspace.strategy: btrfs` is not supported: treadle copies inputs; write `strategy: copy` or remove it".to_owned(),
        ),
        _ => None,
    }
}
