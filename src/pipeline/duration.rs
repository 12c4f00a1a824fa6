//! Durations in the pipeline file: `timeout: 90s`, `1h30m`, `500ms`, or a bare number of seconds.
//!
//! The grammar is Go's and Concourse's, so a timeout written for Concourse or `steps`
//! means the same here: one or more `NUMBER UNIT` parts with no space, the units `ms`,
//! `s`, `m` and `h`, a part's number whole or decimal (`1.5s`). A bare number is seconds.
//!
//! Decision: nothing else is read. `5 minutes`, `1 hour`, `10 m`, `5mins` and `1h 30m`
//! are refused with the accepted forms (humantime, used before, read most of them and
//! worded its refusals in its own terms); a space is never part of a duration, as in Go.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSpec(pub Duration);

/// The forms a duration may take, as every refusal says them.
pub const ACCEPTED: &str = "a number and a unit with no space between, the units ms, s, m and h, \
     e.g. 90s, 5m, 1h30m or 500ms; a bare number is seconds";

/// Why a duration string could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DurationError {
    /// Nothing was written.
    #[error("empty duration: write {ACCEPTED}")]
    Empty,
    /// Not a duration of the grammar above.
    #[error("`{text}` is not a duration: write {ACCEPTED}")]
    Invalid {
        /// The text as written.
        text: String,
    },
}

/// Reads `1h30m`, `90s`, `250ms`, `1.5s`, `2m` or a bare `45` (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let invalid = || DurationError::Invalid {
        text: text.to_owned(),
    };
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let (number, after) = leading_number(rest).ok_or_else(invalid)?;
        let (seconds, after) = unit(after).ok_or_else(invalid)?;
        let part = Duration::try_from_secs_f64(number * seconds).map_err(|_| invalid())?;
        total = total.checked_add(part).ok_or_else(invalid)?;
        rest = after;
    }
    Ok(total)
}

/// The number at the start of `text` (`12`, `1.5`) and what follows it.
fn leading_number(text: &str) -> Option<(f64, &str)> {
    let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let whole = digits(text);
    if whole == 0 {
        return None;
    }
    let mut end = whole;
    if let Some(fraction) = text[whole..].strip_prefix('.') {
        let n = digits(fraction);
        if n == 0 {
            return None;
        }
        end += 1 + n;
    }
    Some((text[..end].parse().ok()?, &text[end..]))
}

/// The unit at the start of `text`, in seconds, and what follows it: the next part's
/// number or nothing (so `5mins` and `5m x` are refused, not read as `5m`).
fn unit(text: &str) -> Option<(f64, &str)> {
    let (seconds, rest) = [("ms", 0.001), ("h", 3600.0), ("m", 60.0), ("s", 1.0)]
        .into_iter()
        .find_map(|(name, secs)| text.strip_prefix(name).map(|rest| (secs, rest)))?;
    match rest.chars().next() {
        None => Some((seconds, rest)),
        Some(c) if c.is_ascii_digit() => Some((seconds, rest)),
        Some(_) => None,
    }
}

/// Formats a duration for the transcript: `0.42s`, `12.3s`, `2m05s`.
pub fn format_duration(d: Duration) -> String {
    // Each form is chosen by the value as it will be rounded, so 59.96s reads `1m00s`,
    // never `60.0s`.
    let secs = d.as_secs_f64();
    if secs < 9.995 {
        format!("{secs:.2}s")
    } else if secs < 59.95 {
        format!("{secs:.1}s")
    } else {
        let whole = secs.round() as u64;
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
        assert_eq!(
            parse_duration("1m30s500ms"),
            Ok(Duration::from_millis(90_500))
        );
        assert_eq!(parse_duration(" "), Err(DurationError::Empty));
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn refuses_words_spaces_and_unknown_units_with_the_accepted_forms() {
        for bad in [
            "5 minutes",
            "1 hour",
            "10 m",
            "5mins",
            "5x",
            "five",
            "1h 30m",
            "1.s",
            ".5s",
            "5m x",
            "1d",
            "-5s",
        ] {
            let err = parse_duration(bad).expect_err(bad).to_string();
            assert!(
                err.contains(&format!("`{bad}` is not a duration"))
                    && err.contains("90s, 5m, 1h30m or 500ms"),
                "{bad}: {err}"
            );
        }
    }
}
