//! The built-in `time` resource: a new version every `interval:` (`source: { interval:
//! 1h }`). A version is `{ "time": "2026-12-01T10:00:00Z" }` (RFC 3339, seconds, UTC); a
//! get writes it to the artifact's `timestamp` file.
//!
//! Its check compares the newest recorded version with the clock: none yet, or one older
//! than the interval, and it reports a new version stamped now.

use std::time::{Duration, SystemTime};

use super::ResourceError;
use crate::pipeline::{Resource, Version};

/// The file a get of a `time` resource writes.
pub const FILE: &str = "timestamp";

/// A `time` resource's `source:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSource {
    /// How long between versions.
    pub interval: Duration,
}

impl TimeSource {
    /// Reads a resource's source.
    pub fn of(resource: &Resource) -> Result<Self, ResourceError> {
        let bad = |why: String| ResourceError::TimeSource {
            name: resource.name.value.clone(),
            why,
        };
        match resource.source.get("interval") {
            Some(serde_json::Value::String(text)) => {
                let interval = crate::pipeline::duration::parse_duration(text)
                    .map_err(|e| bad(e.to_string()))?;
                if interval.is_zero() {
                    return Err(bad("`interval` must be more than zero".to_owned()));
                }
                Ok(Self { interval })
            }
            Some(serde_json::Value::Number(n)) => match n.as_u64() {
                Some(secs) if secs > 0 => Ok(Self {
                    interval: Duration::from_secs(secs),
                }),
                _ => Err(bad(
                    "`interval` must be a positive number of seconds".to_owned()
                )),
            },
            Some(_) => Err(bad("`interval` must be a duration like 1h".to_owned())),
            None => Err(bad(
                "`source:` needs `interval:`, e.g. `interval: 1h`".to_owned()
            )),
        }
    }

    /// The versions a check at `now` reports, given the newest recorded one.
    pub fn check(&self, last: Option<&Version>, now: SystemTime) -> Vec<Version> {
        let last_time = last
            .and_then(|v| v.get("time"))
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        match (last, last_time) {
            (Some(v), Some(t)) if now.duration_since(t).unwrap_or_default() < self.interval => {
                vec![v.clone()]
            }
            (Some(v), Some(_)) => vec![v.clone(), stamp(now)],
            _ => vec![stamp(now)],
        }
    }
}

/// The version stamped `at`.
pub fn stamp(at: SystemTime) -> Version {
    Version::from([(
        "time".to_owned(),
        humantime::format_rfc3339_seconds(at).to_string(),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_once_the_interval_has_passed() {
        let t = TimeSource {
            interval: Duration::from_secs(60),
        };
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first = t.check(None, t0);
        assert_eq!(first, [stamp(t0)]);
        assert_eq!(t.check(first.first(), t0 + Duration::from_secs(59)), first);
        let later = t.check(first.first(), t0 + Duration::from_secs(61));
        assert_eq!(later, [stamp(t0), stamp(t0 + Duration::from_secs(61))]);
    }
}
