//! The first difference between a recorded request body and a replayed one, as a JSON path
//! (`messages[3].content`) with both values.
//!
//! Tool-call ids are compared up to renaming: in each body, every id in
//! `messages[*].tool_calls[*].id` and `messages[*].tool_call_id` is replaced by `call#N`,
//! numbered by first appearance. Ids the model or the session made up at random then
//! compare equal, while a result paired with the wrong call still differs.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

/// How long a shown value may be before it is cut.
const SHOWN_CHARS: usize = 200;

/// Where two bodies first differ, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The JSON path, e.g. `messages[3].content` (empty for the whole body).
    pub path: String,
    /// The recorded value (`(absent)` when the recording has none there).
    pub expected: String,
    /// The value sent now.
    pub got: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "the body"
        } else {
            &self.path
        };
        write!(f, "at {path}: expected {}, got {}", self.expected, self.got)
    }
}

/// The first difference between `expected` (recorded) and `got` (sent now), after tool-call
/// ids are renamed; `None` when they match. Object keys are visited in sorted order.
pub fn first_difference(expected: &Value, got: &Value) -> Option<Difference> {
    let (expected, got) = (rename_call_ids(expected), rename_call_ids(got));
    walk(&expected, &got, String::new())
}

fn walk(expected: &Value, got: &Value, path: String) -> Option<Difference> {
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            let mut keys: Vec<&String> = e.keys().chain(g.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let at = join_key(&path, k);
                match (e.get(k), g.get(k)) {
                    (Some(a), Some(b)) => walk(a, b, at),
                    (a, b) => Some(differ(at, a, b)),
                }
            })
        }
        (Value::Array(e), Value::Array(g)) => {
            let len = e.len().max(g.len());
            (0..len).find_map(|i| {
                let at = format!("{path}[{i}]");
                match (e.get(i), g.get(i)) {
                    (Some(a), Some(b)) => walk(a, b, at),
                    (a, b) => Some(differ(at, a, b)),
                }
            })
        }
        (a, b) if a == b => None,
        (a, b) => Some(differ(path, Some(a), Some(b))),
    }
}

fn differ(path: String, expected: Option<&Value>, got: Option<&Value>) -> Difference {
    Difference {
        path,
        expected: show(expected),
        got: show(got),
    }
}

fn join_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_owned())),
    }
}

fn show(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "(absent)".to_owned();
    };
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{cut}… ({} chars)", text.chars().count())
}

/// A copy of `body` with tool-call ids replaced by `call#N` in order of first appearance.
fn rename_call_ids(body: &Value) -> Value {
    let mut body = body.clone();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut rename = |id: &mut Value| {
        if let Value::String(s) = id {
            let next = names.len() + 1;
            *s = names
                .entry(s.clone())
                .or_insert_with(|| format!("call#{next}"))
                .clone();
        }
    };
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return body;
    };
    for message in messages {
        if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                if let Some(id) = call.get_mut("id") {
                    rename(id);
                }
            }
        }
        if let Some(id) = message.get_mut("tool_call_id") {
            rename(id);
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_bodies_have_no_difference() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(first_difference(&body, &body), None);
    }

    #[test]
    fn names_the_first_differing_path() {
        let a = json!({"messages": [{"role": "user", "content": "hi"}, {"content": "x"}]});
        let b = json!({"messages": [{"role": "user", "content": "hi"}, {"content": "y"}]});
        let d = first_difference(&a, &b).unwrap();
        assert_eq!(d.path, "messages[1].content");
        assert_eq!((d.expected.as_str(), d.got.as_str()), ("\"x\"", "\"y\""));
        assert_eq!(
            d.to_string(),
            "at messages[1].content: expected \"x\", got \"y\""
        );
    }

    #[test]
    fn missing_items_and_keys_show_absent() {
        let a = json!({"messages": [1]});
        let b = json!({"messages": [1, 2], "seed": 3});
        let d = first_difference(&a, &b).unwrap();
        assert_eq!(
            (d.path.as_str(), d.expected.as_str()),
            ("messages[1]", "(absent)")
        );
        let d = first_difference(&json!({"a b": 1}), &json!({"a b": 2})).unwrap();
        assert_eq!(d.path, "[\"a b\"]");
    }

    #[test]
    fn tool_call_ids_compare_up_to_renaming() {
        let with = |call: &str, answer: &str| {
            json!({"messages": [
                {"role": "assistant", "tool_calls": [{"id": call, "function": {"name": "f"}}]},
                {"role": "tool", "tool_call_id": answer, "content": "ok"},
            ]})
        };
        assert_eq!(
            first_difference(&with("abc", "abc"), &with("call_9", "call_9")),
            None
        );
        let d = first_difference(&with("abc", "abc"), &with("call_9", "other")).unwrap();
        assert_eq!(d.path, "messages[1].tool_call_id");
    }

    #[test]
    fn long_values_are_cut() {
        let long = "x".repeat(500);
        let d = first_difference(&json!(long), &json!("y")).unwrap();
        assert!(d.expected.ends_with("(502 chars)"), "{}", d.expected);
        assert_eq!(d.path, "");
    }
}
