//! Durations in the pipeline file: `timeout: 90s`, `1h30m`, `500ms`, or a bare number of seconds.
//!
//! The units are those of Concourse and Go (`ms`, `s`, `m`, `h`), so a timeout written for
//! Concourse or `steps` means the same here.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSpec(pub Duration);

/// Why a duration string could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    /// Nothing was written.
    #[error("empty duration")]
    Empty,
    /// A number had no unit after it, or the unit is unknown.
    #[error("unknown unit `{0}` (use ms, s, m or h, as in 90s or 1h30m)")]
    Unit(String),
    /// Something other than digits where a number was expected.
    #[error("expected a number before the unit in `{0}`")]
    Number(String),
    /// The duration does not fit.
    #[error("duration too large")]
    Overflow,
}

/// Reads `1h30m`, `90s`, `250ms`, `2m` or a bare `45` (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(DurationError::Number(text.to_owned()));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Number(text.to_owned()))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(DurationError::Unit(other.to_owned())),
        };
        let part =
            Duration::try_from_secs_f64(number * scale).map_err(|_| DurationError::Overflow)?;
        total = total.checked_add(part).ok_or(DurationError::Overflow)?;
    }
    Ok(total)
}

/// Formats a duration for the transcript: `0.42s`, `12.3s`, `2m05s`.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.2}s")
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30s, 5m or 1h30m")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationSpec, E> {
                Ok(DurationSpec(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationSpec, E> {
                u64::try_from(v)
                    .map(|v| DurationSpec(Duration::from_secs(v)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationSpec, E> {
                parse_duration(v).map(DurationSpec).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl Serialize for DurationSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", self.0.as_millis()))
    }
}

impl JsonSchema for DurationSpec {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration: 90s, 5m, 1h30m, 250ms, or a number of seconds.",
            "anyOf": [
                { "type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$" },
                { "type": "integer", "minimum": 0 }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_style_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("m").is_err());
    }
}
