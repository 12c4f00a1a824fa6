//! Tool calls written as text: a small model that was offered tools sometimes answers with
//! the call itself as its text (`{"name": "read_file", "arguments": {...}}`, bare, in a
//! code fence or between `<tool_call>` tags) instead of in the response's `tool_calls`.
//! Taken as an answer, that ends the turn with a line of JSON; [`recover_text_calls`]
//! turns it into the calls the model meant.
//!
//! Only a message whose whole text is such calls is turned: text around them, an object
//! of another shape, or a message that already has tool calls is left as it is. The
//! recovered calls then go through repair, the schema check and the guards like any other,
//! and a name that is no tool is answered with the list of tools there are.
//!
//! While the model streams, [`HeldText`] holds its text deltas back for as long as the
//! text so far could still be such a call, so that a subscriber printing text deltas never
//! prints a call's JSON: the held text is published once it cannot be a call, or at the end
//! of the message if it was not one, and dropped if it was.

use serde_json::Value;
use treadle_event::{Block, Message};

/// If the whole text of `message` is one or more tool calls, replaces it with them (ids
/// `{prefix}_{n}`) and returns how many; otherwise leaves it alone and returns 0.
pub(crate) fn recover_text_calls(message: &mut Message, prefix: &str) -> usize {
    if message.tool_uses().next().is_some() {
        return 0;
    }
    let Some(calls) = calls_in(&message.text_content()) else {
        return 0;
    };
    message.content.retain(|b| !matches!(b, Block::Text { .. }));
    let count = calls.len();
    message
        .content
        .extend(
            calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| Block::ToolUse {
                    id: format!("{prefix}_{i}"),
                    name,
                    arguments,
                }),
        );
    count
}

/// The calls `text` consists of, as (name, arguments text); `None` unless it is nothing
/// but calls.
fn calls_in(text: &str) -> Option<Vec<(String, String)>> {
    let mut calls = Vec::new();
    for segment in segments(text.trim())? {
        match serde_json::from_str::<Value>(segment).ok()? {
            Value::Array(items) => {
                for item in &items {
                    calls.push(call_of(item)?);
                }
            }
            object => calls.push(call_of(&object)?),
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// Splits `text` into the JSON it holds: the contents of each code fence or
/// `<tool_call>` element, or the whole text when it has neither. `None` when there is
/// anything but whitespace outside them.
fn segments(text: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix("```") {
            let body_start = after.find('\n').unwrap_or(0);
            let body = &after[body_start..];
            let end = body.find("```")?;
            out.push(body[..end].trim());
            rest = &body[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<tool_call>") {
            let end = after.find("</tool_call>")?;
            out.push(after[..end].trim());
            rest = &after[end + "</tool_call>".len()..];
        } else if out.is_empty() {
            return Some(vec![rest]);
        } else {
            return None;
        }
    }
    Some(out)
}

/// `{"name": "...", "arguments": {...}}` (or `"parameters"`, or arguments as JSON text),
/// and nothing else but an optional `"type"`/`"id"`.
fn call_of(value: &Value) -> Option<(String, String)> {
    let object = value.as_object()?;
    let name = object.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None => "{}".to_owned(),
        Some(Value::String(text)) => text.clone(),
        Some(args @ Value::Object(_)) => args.to_string(),
        Some(_) => return None,
    };
    let known = ["name", "arguments", "parameters", "type", "id"];
    if object.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    Some((name.to_owned(), arguments))
}

/// The text deltas of one model message, held back while the text may be a tool call
/// written as text (see the module's docs).
pub(crate) struct HeldText {
    /// The text so far, while it is held.
    held: String,
    /// Whether deltas pass straight through: the text cannot be a call (or the turn takes
    /// no text calls).
    passing: bool,
}

impl HeldText {
    /// A hold for a message whose text may be tool calls (`active`), or none.
    pub(crate) fn new(active: bool) -> Self {
        Self {
            held: String::new(),
            passing: !active,
        }
    }

    /// What to publish of the next text `piece`: nothing while the text may still be a
    /// call; everything held so far once it cannot be.
    pub(crate) fn take(&mut self, piece: &str) -> Option<String> {
        if self.passing {
            return Some(piece.to_owned());
        }
        self.held.push_str(piece);
        if may_be_calls(&self.held) {
            return None;
        }
        self.passing = true;
        Some(std::mem::take(&mut self.held))
    }

    /// The text still held at the end of the message, to publish when the message was not
    /// taken as calls (empty when nothing is held).
    pub(crate) fn rest(self) -> String {
        self.held
    }
}

/// Whether `text`, the start of a message, may still turn out to be tool calls: empty so
/// far, or opening as calls do (a JSON object or array, a code fence whose language is
/// none or `json`, a `<tool_call>` tag).
fn may_be_calls(text: &str) -> bool {
    let text = text.trim_start();
    if text.is_empty() || text.starts_with(['{', '[']) {
        return true;
    }
    if "```".starts_with(text) || "<tool_call>".starts_with(text) {
        return true;
    }
    if text.starts_with("<tool_call>") {
        return true;
    }
    match text.strip_prefix("```") {
        // The fence's language is known once its first line ends.
        Some(rest) => match rest.split_once('\n') {
            Some((info, _)) => matches!(info.trim(), "" | "json" | "tool_call"),
            None => "json".starts_with(rest.trim()) || "tool_call".starts_with(rest.trim()),
        },
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use treadle_event::Role;

    use super::*;

    fn recovered(text: &str) -> Vec<(String, String)> {
        let mut message = Message::text(Role::Assistant, text);
        recover_text_calls(&mut message, "t");
        message
            .tool_uses()
            .map(|u| (u.name.to_owned(), u.arguments.to_owned()))
            .collect()
    }

    #[test]
    fn calls_written_as_text_become_calls() {
        let call = ("read_file".to_owned(), r#"{"path":"a.md"}"#.to_owned());
        for text in [
            r#"{"name": "read_file", "arguments": {"path": "a.md"}}"#,
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.md\"}}\n```",
            "<tool_call>\n{\"name\": \"read_file\", \"parameters\": {\"path\": \"a.md\"}}\n</tool_call>",
            r#"[{"name": "read_file", "arguments": "{\"path\":\"a.md\"}"}]"#,
        ] {
            assert_eq!(recovered(text), std::slice::from_ref(&call), "{text}");
        }
        let two =
            "```json\n{\"name\": \"a\", \"arguments\": {}}\n```\n```json\n{\"name\": \"b\"}\n```";
        assert_eq!(
            recovered(two),
            [("a".into(), "{}".into()), ("b".into(), "{}".into())]
        );
    }

    #[test]
    fn text_is_held_only_while_it_may_be_a_call() {
        let mut prose = HeldText::new(true);
        assert_eq!(prose.take("  "), None);
        assert_eq!(prose.take("The file").as_deref(), Some("  The file"));
        assert_eq!(prose.take(" says hi.").as_deref(), Some(" says hi."));
        assert_eq!(prose.rest(), "");

        let mut call = HeldText::new(true);
        for piece in ["```", "js", "on\n{\"name\"", ": \"a\"}\n```"] {
            assert_eq!(call.take(piece), None, "{piece}");
        }
        assert_eq!(call.rest(), "```json\n{\"name\": \"a\"}\n```");

        let mut code = HeldText::new(true);
        assert_eq!(code.take("```"), None);
        assert_eq!(
            code.take("rust\nfn main() {}").as_deref(),
            Some("```rust\nfn main() {}")
        );

        let mut tag = HeldText::new(true);
        assert_eq!(tag.take("<tool"), None);
        assert_eq!(tag.take("_call>{"), None);
        let mut html = HeldText::new(true);
        assert_eq!(html.take("<b>").as_deref(), Some("<b>"));

        let mut off = HeldText::new(false);
        assert_eq!(off.take("{").as_deref(), Some("{"));
    }

    #[test]
    fn answers_stay_answers() {
        for text in [
            "The file says hello.",
            r#"Here you go: {"name": "read_file", "arguments": {}}"#,
            r#"{"name": "Ada", "age": 36}"#,
            r#"{"verdict": "approve"}"#,
            "```json\n{\"name\": \"a\"}\n```\nand then I will stop",
            "",
        ] {
            assert!(recovered(text).is_empty(), "{text}");
        }
        // A message that already has calls is not touched.
        let mut message = Message::text(Role::Assistant, r#"{"name": "a"}"#);
        message.content.push(Block::ToolUse {
            id: "1".into(),
            name: "b".into(),
            arguments: "{}".into(),
        });
        assert_eq!(recover_text_calls(&mut message, "t"), 0);
        assert_eq!(message.content.len(), 2);
    }
}
