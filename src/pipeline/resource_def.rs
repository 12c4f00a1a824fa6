//! A resource as the pipeline file writes it (`resources:`), before its type is resolved
//! (`typed_resource`); split from `format` so that a typed resource, which a step holds,
//! does not depend on the whole file's format.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::at::At;

/// A resource (`get:` / `put:` target).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resource {
    /// Name steps use in `get:` and `put:`.
    pub name: At<String>,
    /// Resource type; `git` is built in.
    #[serde(rename = "type")]
    pub kind: At<String>,
    /// Type-specific settings, e.g. `{ uri, branch }` for git.
    #[serde(default)]
    pub source: BTreeMap<String, serde_json::Value>,
    /// The environment variable holding the token `POST /hooks/check/NAME` must carry
    /// (its name, never the token itself; see `treadle docs watch`).
    #[serde(default)]
    pub webhook_token_env: Option<At<String>>,
    /// Variables passed to this resource's scripts by name, besides its type's `env:`.
    #[serde(default)]
    pub env: Vec<At<String>>,
}
