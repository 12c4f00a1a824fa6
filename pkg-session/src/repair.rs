//! Repair of malformed tool-call arguments, as small local models write them.
//!
//! A model asked for a JSON object of arguments sometimes writes almost one: wrapped in a
//! code fence or prose, with single quotes, unquoted keys, trailing commas, Python's
//! `True`/`None`, raw newlines inside strings, or cut off before its closing braces. Such a
//! call would only be refused and asked again, which a small model often gets wrong the same
//! way. [`repair_arguments`] rewrites those few shapes into the object the model meant.
//!
//! It is conservative: valid arguments are never touched (the caller only asks about text
//! that does not parse), anything outside the rules above gives up rather than guesses, and
//! the result must be a JSON object. The repaired object is then checked against the tool's
//! schema like any other, so a repair can only recover a call, never widen what it may do.

use serde_json::Value;

/// Repairs the arguments of every tool use in `message` whose text is not valid JSON, in
/// place, so the history holds valid JSON (some servers refuse a history that does not).
/// Returns how many calls were repaired.
pub(crate) fn repair_tool_uses(message: &mut treadle_event::Message) -> usize {
    let mut repaired = 0;
    for block in &mut message.content {
        if let treadle_event::Block::ToolUse { arguments, .. } = block {
            // Valid JSON is only checked, not built into a tree: this runs on every call.
            let valid = serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_ok();
            if arguments.trim().is_empty() || valid {
                continue;
            }
            if let Some(fixed) = repair_arguments(arguments) {
                *arguments = fixed.to_string();
                repaired += 1;
            }
        }
    }
    repaired
}

/// The object malformed `raw` arguments most likely meant, or `None` when no rule applies.
///
/// Also unwraps an object sent as a JSON string (`"{\"path\": \"a\"}"`).
pub fn repair_arguments(raw: &str) -> Option<Value> {
    if let Ok(Value::String(inner)) = serde_json::from_str::<Value>(raw)
        && let Ok(object @ Value::Object(_)) = serde_json::from_str::<Value>(&inner)
    {
        return Some(object);
    }
    let start = raw.find('{')?;
    let text = Rewriter::default().run(&raw[start..])?;
    match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => Some(object),
        _ => None,
    }
}

/// What a container on the stack is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Object,
    Array,
}

/// One pass over the text from its first `{`, writing strict JSON.
#[derive(Default)]
struct Rewriter {
    out: String,
    stack: Vec<Open>,
}

impl Rewriter {
    /// Rewrites `text`, which starts with `{`; stops at the brace that closes it (what
    /// follows is prose or a fence) and closes whatever a truncation left open.
    fn run(mut self, text: &str) -> Option<String> {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' | '\'' => self.string(c, &mut chars),
                '{' => self.open(Open::Object, '{'),
                '[' => self.open(Open::Array, '['),
                '}' | ']' => {
                    self.close(c)?;
                    if self.stack.is_empty() {
                        return Some(self.out);
                    }
                }
                ':' => {
                    self.out.push(':');
                    // A key with no value (`"a": }`): the model meant nothing, which is null.
                    let next = next_significant(&mut chars);
                    if matches!(next, None | Some(',' | '}')) {
                        self.out.push_str("null");
                    }
                }
                c if c.is_ascii_alphabetic() || c == '_' => {
                    let word = take_word(c, &mut chars);
                    self.word(&word, &mut chars)?;
                }
                c if c.is_whitespace() => self.out.push(c),
                c if c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | ',') => self.out.push(c),
                _ => return None,
            }
        }
        // Truncated: close what is open, innermost first.
        if self.out.trim_end().ends_with(':') {
            self.out.push_str("null");
        }
        while let Some(open) = self.stack.last().copied() {
            self.close(match open {
                Open::Object => '}',
                Open::Array => ']',
            })?;
        }
        Some(self.out)
    }

    fn open(&mut self, kind: Open, c: char) {
        self.stack.push(kind);
        self.out.push(c);
    }

    /// Closes the innermost container, dropping a trailing comma before it.
    fn close(&mut self, c: char) -> Option<()> {
        let expected = match c {
            '}' => Open::Object,
            _ => Open::Array,
        };
        if self.stack.pop()? != expected {
            return None;
        }
        let kept = self.out.trim_end().len();
        self.out.truncate(kept);
        if self.out.ends_with(',') {
            self.out.pop();
        }
        self.out.push(c);
        Some(())
    }

    /// A bare word: a JSON literal, a Python one, or an unquoted key.
    fn word(
        &mut self,
        word: &str,
        chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    ) -> Option<()> {
        let literal = match word {
            "true" | "True" => Some("true"),
            "false" | "False" => Some("false"),
            "null" | "None" => Some("null"),
            _ => None,
        };
        let expects_key = self.stack.last() == Some(&Open::Object)
            && matches!(self.out.trim_end().chars().last(), Some('{' | ','));
        if expects_key && next_significant(chars) == Some(':') {
            self.out.push('"');
            self.out.push_str(word);
            self.out.push('"');
            return Some(());
        }
        self.out.push_str(literal?);
        Some(())
    }

    /// A string opened by `quote` (`"` or `'`), written double-quoted with its control
    /// characters escaped; a truncated one is closed.
    fn string(&mut self, quote: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        self.out.push('"');
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    // `\'` is not a JSON escape; inside single quotes it means a quote.
                    Some('\'') => self.out.push('\''),
                    Some(next) => {
                        self.out.push('\\');
                        self.out.push(next);
                    }
                    None => {}
                },
                c if c == quote => {
                    self.out.push('"');
                    return;
                }
                '"' => self.out.push_str("\\\""),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if c.is_control() => self.out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// The next character that is not whitespace, without consuming it.
fn next_significant(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<char> {
    // Peeking past whitespace would consume it; whitespace between tokens carries no
    // meaning in JSON, so dropping it is harmless.
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    chars.peek().copied()
}

fn take_word(first: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
    let mut word = String::from(first);
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            word.push(c);
            chars.next();
        } else {
            break;
        }
    }
    word
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fixed(raw: &str) -> Option<Value> {
        assert!(
            serde_json::from_str::<Value>(raw).is_err() || raw.starts_with('"'),
            "test input must be malformed: {raw}"
        );
        repair_arguments(raw)
    }

    #[test]
    fn repairs_what_small_models_write() {
        let cases = [
            (r#"{"path": "a.md",}"#, json!({"path": "a.md"})),
            ("{'path': 'a.md'}", json!({"path": "a.md"})),
            ("{path: \"a.md\", n: 3}", json!({"path": "a.md", "n": 3})),
            (
                "```json\n{\"path\": \"a.md\"}\n```",
                json!({"path": "a.md"}),
            ),
            (
                "Sure! Here is the call: {\"path\": \"a.md\"} Let me know.",
                json!({"path": "a.md"}),
            ),
            (
                "{\"path\": \"a.md\", \"content\": \"line one\nline two\"}",
                json!({"path": "a.md", "content": "line one\nline two"}),
            ),
            (
                "{\"path\": \"a.md\", \"n\": ",
                json!({"path": "a.md", "n": null}),
            ),
            ("{\"path\": \"a.m", json!({"path": "a.m"})),
            (
                "{\"ok\": True, \"x\": None, \"l\": [1, 2,],}",
                json!({"ok": true, "x": null, "l": [1, 2]}),
            ),
            (
                "{'say': 'it\\'s \"fine\"'}",
                json!({"say": "it's \"fine\""}),
            ),
            (r#""{\"path\": \"a.md\"}""#, json!({"path": "a.md"})),
        ];
        for (raw, want) in cases {
            assert_eq!(fixed(raw), Some(want), "repairing {raw}");
        }
    }

    #[test]
    fn gives_up_rather_than_guesses() {
        for raw in [
            "no object here",
            "{\"path\": a.md}",
            "{\"a\": [1, 2}",
            "[1, 2",
            "{\"a\": @}",
        ] {
            assert_eq!(fixed(raw), None, "{raw} must not be repaired");
        }
        // A JSON string that is not an object stays unrepaired.
        assert_eq!(repair_arguments(r#""just text""#), None);
    }

    #[test]
    fn only_malformed_calls_are_rewritten() {
        use treadle_event::{Block, Message, Role};
        let valid = r#"{"b": 1, "a": 2}"#;
        let mut message = Message {
            role: Role::Assistant,
            content: vec![
                Block::ToolUse {
                    id: "1".into(),
                    name: "t".into(),
                    arguments: valid.into(),
                },
                Block::ToolUse {
                    id: "2".into(),
                    name: "t".into(),
                    arguments: "{'a': 1,}".into(),
                },
                Block::ToolUse {
                    id: "3".into(),
                    name: "t".into(),
                    arguments: String::new(),
                },
            ],
        };
        assert_eq!(repair_tool_uses(&mut message), 1);
        let args: Vec<&str> = message.tool_uses().map(|u| u.arguments).collect();
        assert_eq!(args, [valid, r#"{"a":1}"#, ""]);
    }
}
