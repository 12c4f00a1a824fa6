//! The step cache: every leaf step has a content-addressed key, and a step whose key has a
//! succeeded record is replayed instead of run (docs/caching.md).
//!
//! * `digest.rs`: tree digests and manifests;
//! * `cas.rs`: the object store under `.treadle/cas/`;
//! * `key.rs`: what a key is made of;
//! * `chain.rs`: which step each step's key chains to;
//! * `records.rs`: the cache's tables in the state file;
//! * `live.rs`: one run's view of the cache ([`StepCache`]), resume and replay;
//! * `replay.rs`: the executor's side: look up, replay, store;
//! * `setup.rs`: opening the cache for a run;
//! * `plan.rs`: `treadle plan`.

pub mod cas;
pub mod chain;
pub mod digest;
pub mod key;
pub mod live;
pub mod plan;
pub mod records;
mod replay;
pub mod setup;

use schemars::JsonSchema;
use serde::Deserialize;

pub use digest::{Digest, Manifest, manifest};
pub use key::KeyParts;
pub use live::{Start, StartError, StepCache};

/// The store's size limit when the pipeline sets none: 2 GiB.
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

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
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
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("3 parsecs"), None);
    }
}
