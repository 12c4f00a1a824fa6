//! The keys that bring the library's controls to an agent step: `permissions:` on an agent,
//! `output_schema:`, `min_confidence:` and `escalate_to:` on a step, and `budget: { dollars }`.
//!
//! Their checks are in [`super::check_controls`], which the checker calls for each agent
//! step, agent and job.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The word `escalate_to:` takes for a person (an approval), as opposed to an agent's name.
pub const HUMAN: &str = "human";

/// `output_schema:`: the agent's answer as JSON, checked against `schema`, written to
/// `OUTPUT/output.json` where `OUTPUT` is one of the step's `outputs:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputSchema {
    /// The output directory (one of the step's `outputs:`) the JSON is written to.
    pub output: String,
    /// A JSON Schema the answer must satisfy.
    pub schema: serde_json::Value,
}

/// The file `output_schema:` writes in its output directory.
pub const OUTPUT_FILE: &str = "output.json";

/// The shape of `permissions:`, for the pipeline's JSON Schema only: the value itself is read
/// as a `treadle_hook::Policy`.
#[derive(Debug, Clone, JsonSchema)]
pub struct PermissionsSchema {
    /// Ordered rules; the first that covers a call decides.
    pub rules: Vec<PermissionRuleSchema>,
    /// What calls no rule covers get (`allow`, `ask` or `{ deny: reason }`); left out:
    /// they are denied.
    pub default: Option<serde_json::Value>,
}

/// One rule of `permissions:` (schema only).
#[derive(Debug, Clone, JsonSchema)]
pub struct PermissionRuleSchema {
    /// A glob over tool names (`write_*`, `*`).
    pub tool: String,
    /// The call's arguments must contain these (objects compared key by key).
    pub args: Option<serde_json::Value>,
    /// Regular expressions each named argument must match.
    pub matches: Option<HashMap<String, String>>,
    /// `allow`, `ask`, or `{ deny: "the reason the model reads" }`.
    pub action: serde_json::Value,
}
