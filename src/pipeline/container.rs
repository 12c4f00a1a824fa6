//! Container keys of a step (`image:`, `network:`, `privileged:`, `user:`,
//! `container_limits:`), the step's `env:` in both spellings, and the top-level
//! `workspace:` tuning: their types and their checks.
//!
//! treadle runs commands on this machine; it has no container runtime of its own. These keys
//! load and are checked so a pipeline written for `steps` validates, `validate` warns about
//! each step that needs a container, and such a step fails with an error saying so.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::at::{At, Pos};
use super::check_flow::Finding;
use super::diagnostic::Problem;
use super::format::Step;
use super::kind::StepKind;

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

/// The warnings `validate` gives about what this file needs that treadle cannot do:
/// `(position, message)`.
pub fn warnings(pipeline: &super::format::Pipeline) -> Vec<(Pos, String)> {
    let mut out = Vec::new();
    if let Some(why) = pipeline.workspace.as_ref().and_then(unsupported) {
        let pos = pipeline
            .workspace
            .as_ref()
            .and_then(|w| w.strategy.as_ref())
            .map_or(Pos::default(), |s| s.pos);
        out.push((pos, why));
    }
    if let Some(n) = pipeline
        .defaults
        .as_ref()
        .and_then(|d| d.run_history.as_ref())
    {
        out.push((
            n.pos,
            "`defaults.run_history` has no effect: treadle keeps every run".to_owned(),
        ));
    }
    for t in &pipeline.resource_types {
        if let Some(image) = &t.image {
            out.push((image.pos, no_runtime(&image.value)));
        }
    }
    for job in &pipeline.jobs {
        super::walk::visit_job(job, &mut |s| {
            if let Some(image) = &s.image {
                out.push((image.pos, no_runtime(&image.value)));
            }
        });
    }
    out
}

/// Checks a `workspace:` block.
pub fn workspace(w: &WorkspaceConfig) -> Vec<Finding> {
    match &w.strategy {
        Some(s) if s.value != "copy" && s.value != "btrfs" => vec![(
            s.pos,
            Problem::InvalidValue,
            format!("`workspace.strategy` is `{}`", s.value),
            "write `copy` (the default) or `btrfs`".to_owned(),
        )],
        _ => Vec::new(),
    }
}

/// Checks the container keys of an `agents:` entry: each beside `image:`.
pub fn agent(a: &super::agent_def::Agent) -> Vec<Finding> {
    let keys = [
        ("network", a.network.as_ref().map(|n| n.pos)),
        ("privileged", a.privileged.as_ref().map(|p| p.pos)),
        ("user", a.user.as_ref().map(|u| u.pos)),
        (
            "container_limits",
            a.container_limits.as_ref().map(|c| c.pos),
        ),
    ];
    if a.image.is_some() {
        return Vec::new();
    }
    keys.into_iter()
        .filter_map(|(key, pos)| Some((key, pos?)))
        .map(|(key, pos)| {
            (
                pos,
                Problem::BadStep,
                format!("`{key}` of agent `{}` needs `image:`", a.name.value),
                format!("its tools run on this machine, with no container to set {key} on; add `image:` or remove `{key}`"),
            )
        })
        .collect()
}

/// The finding for `container_limits:` that sets no limit (on a step or a resource type).
pub fn empty_limits(limits: &At<ContainerLimits>) -> Option<Finding> {
    (limits.value.cpu.is_none() && limits.value.memory.is_none()).then(|| {
        (
            limits.pos,
            Problem::MissingKey,
            "`container_limits` sets no limit".to_owned(),
            "give `cpu:` (a share weight, 1024 = default) and/or `memory:` (bytes)".to_owned(),
        )
    })
}

/// Checks the container keys of a step.
pub fn step(step: &At<Step>) -> Vec<Finding> {
    let mut out = Vec::new();
    let resource = matches!(&step.kind, StepKind::Get { .. } | StepKind::Put { .. });
    let keys: [(&str, Option<Pos>); 5] = [
        ("image", step.image.as_ref().map(|i| i.pos)),
        ("network", step.network.as_ref().map(|n| n.pos)),
        ("privileged", step.privileged.as_ref().map(|p| p.pos)),
        ("user", step.user.as_ref().map(|u| u.pos)),
        (
            "container_limits",
            step.container_limits.as_ref().map(|c| c.pos),
        ),
    ];
    for (key, pos) in keys {
        let Some(pos) = pos else { continue };
        if resource {
            out.push((
                pos,
                Problem::BadStep,
                format!("`{key}` does not belong on a `get`/`put` step"),
                "a resource's commands run on this machine; set it on a task or agent step"
                    .to_owned(),
            ));
        } else if key != "image" && step.image.is_none() {
            out.push((
                pos,
                Problem::BadStep,
                format!("`{key}` needs `image:`"),
                format!("a command without a container has no {key} to set; add `image:` or remove `{key}`"),
            ));
        }
    }
    for (key, value) in [("network", &step.network), ("user", &step.user)] {
        if let Some(v) = value
            && (v.value.starts_with('-') || v.value.is_empty())
        {
            out.push((
                v.pos,
                Problem::InvalidValue,
                format!("`{key}: {}` is not a {key} name", v.value),
                format!(
                    "write a plain name, e.g. `{key}: {}`",
                    if key == "user" { "root" } else { "none" }
                ),
            ));
        }
    }
    if let Some(image) = &step.image
        && image.value.trim().is_empty()
    {
        out.push((
            image.pos,
            Problem::InvalidValue,
            "`image` is empty".to_owned(),
            "name an image, e.g. `image: alpine:3.20`, or remove the key".to_owned(),
        ));
    }
    out.extend(step.container_limits.as_ref().and_then(empty_limits));
    out
}
