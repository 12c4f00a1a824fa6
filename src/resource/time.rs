//! The built-in `time` resource: a new version every `interval:` (`source: { interval:
//! 1h }`) or at each tick of a cron `schedule:` (`source: { schedule: "0 2 * * *" }`, five
//! fields, UTC). A version is `{ "time": "2026-12-01T10:00:00Z" }` (RFC 3339, seconds,
//! UTC); a get writes it to the artifact's `timestamp` file.
//!
//! Its `source:` is read at load (`crate::pipeline::typed_resource`). Its check compares the newest recorded version with the clock. With `interval:`, none
//! yet or one older than the interval gives a new version stamped now; with `schedule:`,
//! a tick after the newest recorded version (or any tick, when there is none) gives a new
//! version stamped at the latest tick that has passed.

use std::time::SystemTime;

use crate::pipeline::Version;

/// The file a get of a `time` resource writes.
pub const FILE: &str = "timestamp";

pub use crate::pipeline::typed_resource::TimeSource;

impl TimeSource {
    /// The versions a check at `now` reports, given the newest recorded one.
    pub fn check(&self, last: Option<&Version>, now: SystemTime) -> Vec<Version> {
        let last_time = last
            .and_then(|v| v.get("time"))
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        let due = match self {
            Self::Interval(every) => match last_time {
                Some(t) if now.duration_since(t).unwrap_or_default() < *every => None,
                _ => Some(now),
            },
            Self::Schedule(cron) => {
                let at = chrono::DateTime::<chrono::Utc>::from(now);
                let tick = cron
                    .find_previous_occurrence(&at, true)
                    .ok()
                    .map(SystemTime::from);
                match (tick, last_time) {
                    (Some(tick), Some(t)) if tick <= t => None,
                    (tick, _) => tick,
                }
            }
        };
        let mut out: Vec<Version> = last.cloned().into_iter().collect();
        out.extend(due.map(stamp));
        out
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
    use std::str::FromStr;
    use std::time::Duration;

    #[test]
    fn a_new_version_once_the_interval_has_passed() {
        let t = TimeSource::Interval(Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first = t.check(None, t0);
        assert_eq!(first, [stamp(t0)]);
        assert_eq!(t.check(first.first(), t0 + Duration::from_secs(59)), first);
        let later = t.check(first.first(), t0 + Duration::from_secs(61));
        assert_eq!(later, [stamp(t0), stamp(t0 + Duration::from_secs(61))]);
    }

    #[test]
    fn a_schedule_gives_a_version_per_tick_that_passed() {
        let t = TimeSource::Schedule(Box::new(croner::Cron::from_str("0 2 * * *").unwrap()));
        let at = |s: &str| humantime::parse_rfc3339(s).unwrap();
        let first = t.check(None, at("2026-12-01T10:00:00Z"));
        assert_eq!(first, [stamp(at("2026-12-01T02:00:00Z"))]);
        // The same day: no tick since.
        assert_eq!(t.check(first.first(), at("2026-12-01T23:59:00Z")), first);
        let next = t.check(first.first(), at("2026-12-02T02:00:30Z"));
        assert_eq!(next[1], stamp(at("2026-12-02T02:00:00Z")));
    }
}
