//! The pipeline's top-level settings besides its jobs: `prices:` per model, `cache:`
//! with its size limit, `limits:` on what a step may produce, and the one parser of sizes
//! (`500MB`, `2GiB`).
//!
//! They live with the file format because the format is read before anything runs; the
//! agent step (pricing) and the step cache (eviction) use them from here.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What one model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Per million prompt (input) tokens.
    pub prompt: f64,
    /// Per million completion (output) tokens.
    pub completion: f64,
    /// Per million prompt tokens served from the provider's cache (default: the prompt
    /// price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<f64>,
}

/// Prices by model name, as a pipeline's `prices:` gives them.
pub type Prices = BTreeMap<String, ModelPrice>;

/// The step cache's size limit when the pipeline sets none: 2 GiB.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// `cache:` at the top of a pipeline.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Most bytes the object store keeps; the least recently used entries go first.
    /// A number of bytes or a size such as `500MB`, `2GiB`.
    #[serde(default)]
    pub max_size: Option<SizeSpec>,
}

impl CacheConfig {
    /// The limit in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_size.as_ref().map_or(DEFAULT_MAX_SIZE, |s| s.0)
    }
}

/// The total output a step may print when the pipeline sets no limit: 16 MiB.
pub const DEFAULT_STEP_OUTPUT: u64 = 16 << 20;

/// `limits:` at the top of a pipeline: what one step may produce before it is stopped.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most bytes of output (stdout and stderr together) one task step may print; the step
    /// is stopped and fails when it prints more. A number of bytes or a size such as
    /// `100KB`, `16MiB` (default 16 MiB).
    #[serde(default)]
    pub step_output: Option<SizeSpec>,
}

impl LimitsConfig {
    /// The step output limit in bytes.
    pub fn step_output_bytes(&self) -> u64 {
        self.step_output
            .as_ref()
            .map_or(DEFAULT_STEP_OUTPUT, |s| s.0)
    }
}

/// An agent's `limits:`: bounds on its model traffic, each failing the step with an error
/// naming the limit when reached. Left out, the session's defaults hold (120 s, 8 MiB,
/// 10 min).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentLimits {
    /// Longest silence from the model endpoint: before the response starts, or between
    /// two pieces of the stream (`30s`, `2m`).
    #[serde(default)]
    pub model_idle: Option<super::duration::DurationSpec>,
    /// Most bytes of one model response, counted as they arrive (`1MiB`, `500KB`).
    #[serde(default)]
    pub model_response: Option<SizeSpec>,
    /// Longest one model call may take in all, from the request to the end of its stream,
    /// however steadily it flows (`5m`); default 10 minutes.
    #[serde(default)]
    pub model_call: Option<super::duration::DurationSpec>,
}

/// A size in bytes, written as a number or with a unit (`KB`, `MB`, `GB`, `KiB`, `MiB`,
/// `GiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(with = "serde_json::Value")]
pub struct SizeSpec(pub u64);

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let parsed = match &v {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => parse_size(s),
            _ => None,
        };
        parsed.map(SizeSpec).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{v}` is not a size; write bytes (1048576) or a size like 500MB or 2GiB"
            ))
        })
    }
}

/// Reads a size: bytes, or a number with a unit. The unit's case does not matter, and
/// each has one meaning: `KB`/`MB`/`GB` are powers of 1000, `KiB`/`MiB`/`GiB` powers of
/// 1024. A bare `K`, `M` or `G` is refused rather than guessed.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("500MB"), Some(500_000_000));
        assert_eq!(parse_size("500mb"), Some(500_000_000));
        assert_eq!(parse_size("3 mib"), Some(3 << 20));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("3 parsecs"), None);
        // `m` could mean either; it is not guessed.
        assert_eq!(parse_size("5m"), None);
    }
}
