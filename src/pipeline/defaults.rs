//! `defaults:` at the top of a pipeline: what every agent that says nothing for itself
//! gets (its model, the share a sub-agent may take of a budget, the pre-run probe), and
//! how much history the state file keeps (`version_history:`, read by the resource check),
//! and the command hooks every agent runs (`hooks:`).
//!
//! A default fills in, it never overrides: an agent's own key always wins.

use schemars::JsonSchema;
use serde::Deserialize;

use super::at::At;
use super::duration::DurationSpec;

/// `defaults:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// The model (`provider/model`) of every agent whose `source:` names none.
    #[serde(default)]
    pub model: Option<At<String>>,
    /// The share (percent, 1 to 100) of what is left of a budget one sub-agent call may
    /// spend, for agents that do not set `delegate_budget_percent:`.
    #[serde(default)]
    pub delegate_budget_percent: Option<At<u32>>,
    /// The pre-run probe of models and MCP servers.
    #[serde(default)]
    pub preflight: Option<PreflightDefaults>,
    /// How many runs of each job the state file keeps.
    #[serde(default)]
    pub run_history: Option<At<u32>>,
    /// Versions of each resource kept in the state file, newest kept (default 1000; `0`
    /// keeps every one).
    #[serde(default)]
    pub version_history: Option<At<u32>>,
    /// Command hooks every agent runs, before its own (`treadle docs hooks`).
    #[serde(default)]
    pub hooks: Option<super::hook_def::Hooks>,
    /// The `network:` of every task and agent that sets none (default `none`).
    #[serde(default)]
    pub network: Option<At<super::network::Network>>,
}

/// How many versions of one resource the state file keeps when `defaults:` does not say.
pub const DEFAULT_VERSION_HISTORY: u32 = 1000;

impl Defaults {
    /// The version history cap in force (`0`: no cap).
    pub fn version_history(defaults: Option<&Self>) -> u32 {
        defaults
            .and_then(|d| d.version_history.as_ref())
            .map_or(DEFAULT_VERSION_HISTORY, |v| v.value)
    }
}

/// `defaults: preflight:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreflightDefaults {
    /// `true` skips the pre-run probe entirely (steps' key): every agent starts on its
    /// primary source, as if each said `preflight: false`.
    #[serde(default)]
    pub disabled: Option<At<bool>>,
    /// How long one probe may take.
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// A target verified this recently is not probed again.
    #[serde(default)]
    pub cache: Option<At<DurationSpec>>,
}
