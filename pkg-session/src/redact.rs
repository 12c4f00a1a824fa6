//! [`Secrets`]: secret values (API keys) scrubbed from text in plain and encoded forms.
//!
//! A model that was shown a key, or is told to, can repeat it, reversed or encoded. The
//! session scrubs every assistant message once, where a turn materialises it from the
//! stream, so the journal, the events, tool arguments and the turn's answer never carry a
//! key. The same scrubber serves the pipeline runner for everything else it writes.
//!
//! The forms recognised for each secret (decided here; documented in docs/security.md):
//!
//! * the value itself and the value reversed;
//! * lower- and upper-case hex of its bytes;
//! * percent-encoding (upper- and lower-case escapes) when that differs from the value;
//! * base64, standard and URL-safe alphabets, at each of the three byte alignments the
//!   value can have inside a longer encoded text. Only the characters that depend on the
//!   secret's bytes alone are matched, so padding and neighbouring bytes do not matter; the
//!   at most two edge characters left in place carry fewer than 12 bits of the key.
//!
//! * any of these written with JSON string escapes, wholly or in part (`\u0073k-...`,
//!   `\/`): the text is also read with its escapes decoded, and a span whose decoded
//!   reading holds a form is masked whole.
//!
//! Each form is replaced by [`Secrets::MASK`]. Values shorter than [`Secrets::MIN_LEN`]
//! are ignored: masking them would mangle ordinary words.

use std::borrow::Cow;

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use treadle_event::{Block, Message};

/// A set of secret values and the forms of each that are scrubbed.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Every form of every secret, longest first so a longer form is masked whole.
    forms: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} forms)", self.forms.len())
    }
}

impl Secrets {
    /// What a scrubbed secret is replaced with.
    pub const MASK: &'static str = "***";
    /// Values (and encoded fragments) shorter than this are not scrubbed.
    pub const MIN_LEN: usize = 6;

    /// The forms of each value (surrounding whitespace trimmed).
    pub fn new<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Self {
        let mut secrets = Self::default();
        secrets.extend(values);
        secrets
    }

    /// Adds more values.
    pub fn extend<S: AsRef<str>>(&mut self, values: impl IntoIterator<Item = S>) {
        for value in values {
            let value = value.as_ref().trim();
            if value.len() >= Self::MIN_LEN {
                self.forms.extend(forms_of(value));
            }
        }
        self.forms.retain(|f| f.len() >= Self::MIN_LEN);
        self.forms
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.forms.dedup();
    }

    /// Whether there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// `text` with every form of every secret replaced by [`Self::MASK`], also where the
    /// text writes it with JSON string escapes (`\u0073k-...`, wholly or in part).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for form in &self.forms {
            if out.contains(form.as_str()) {
                out = Cow::Owned(out.replace(form.as_str(), Self::MASK));
            }
        }
        if out.contains('\\')
            && let Some(clean) = self.scrub_escaped(&out)
        {
            out = Cow::Owned(clean);
        }
        out
    }

    /// `text` with each span whose JSON-unescaped reading holds a form of a secret masked
    /// whole; `None` when none does.
    fn scrub_escaped(&self, text: &str) -> Option<String> {
        let (decoded, spans) = json_unescaped(text);
        let mut hidden: Vec<(usize, usize)> = Vec::new();
        for form in &self.forms {
            for (at, _) in decoded.match_indices(form.as_str()) {
                let first = spans.get(at)?;
                let last = spans.get(at + form.len() - 1)?;
                hidden.push((first.0, last.1));
            }
        }
        if hidden.is_empty() {
            return None;
        }
        hidden.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        for (start, end) in hidden {
            if end <= done {
                continue;
            }
            if start >= done {
                out.push_str(text.get(done..start)?);
                out.push_str(Self::MASK);
            }
            done = end;
        }
        out.push_str(text.get(done..)?);
        Some(out)
    }

    /// Scrubs tool-call arguments: the raw text, and when it is JSON, every string in it
    /// after decoding (so `\u0073k-...` escapes do not hide a key). JSON that needed no
    /// change is returned as written.
    pub fn scrub_arguments(&self, arguments: &str) -> String {
        let raw = self.scrub(arguments);
        let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&raw) else {
            return raw.into_owned();
        };
        if self.scrub_value(&mut value) {
            value.to_string()
        } else {
            raw.into_owned()
        }
    }

    /// Scrubs every block of `message` in place; true if anything changed.
    pub fn scrub_message(&self, message: &mut Message) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut changed = false;
        for block in &mut message.content {
            match block {
                Block::Text { text } | Block::Reasoning { text } => {
                    changed |= self.replace(text);
                }
                Block::ToolUse { arguments, .. } => {
                    let clean = self.scrub_arguments(arguments);
                    if clean != *arguments {
                        *arguments = clean;
                        changed = true;
                    }
                }
                Block::ToolResult { content, .. } => changed |= self.replace(content),
            }
        }
        changed
    }

    fn replace(&self, text: &mut String) -> bool {
        match self.scrub(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *text = clean;
                true
            }
        }
    }

    fn scrub_value(&self, value: &mut serde_json::Value) -> bool {
        match value {
            serde_json::Value::String(s) => self.replace(s),
            serde_json::Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| self.scrub_value(v) | changed),
            serde_json::Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                let mut changed = false;
                for key in keys {
                    let clean = self.scrub(&key);
                    if let Cow::Owned(clean) = clean
                        && let Some(v) = map.remove(&key)
                    {
                        map.insert(clean, v);
                        changed = true;
                    }
                }
                map.values_mut()
                    .fold(changed, |changed, v| self.scrub_value(v) | changed)
            }
            _ => false,
        }
    }
}

/// Every recognised form of one secret value.
fn forms_of(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut forms = vec![value.to_owned(), value.chars().rev().collect()];
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    forms.push(hex.to_uppercase());
    forms.push(hex);
    let percent = percent_encode(bytes);
    if percent != value {
        forms.push(percent.to_lowercase_escapes());
        forms.push(percent);
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for shift in 0..3 {
            forms.push(base64_core(engine, bytes, shift));
        }
    }
    forms
}

/// `text` read as the inside of a JSON string: its escapes (`\uXXXX`, surrogate pairs,
/// `\n`, `\/`, ...) decoded, and for each byte of the result the byte range of `text` it
/// came from. A malformed escape is kept as written.
fn json_unescaped(text: &str) -> (String, Vec<(usize, usize)>) {
    let mut decoded = String::with_capacity(text.len());
    let mut spans = Vec::with_capacity(text.len());
    let mut push = |c: char, start: usize, end: usize, decoded: &mut String| {
        decoded.push(c);
        spans.extend(std::iter::repeat_n((start, end), c.len_utf8()));
    };
    let mut i = 0;
    while let Some(c) = text.get(i..).and_then(|t| t.chars().next()) {
        if c == '\\'
            && let Some((decoded_char, len)) = escape_at(text, i)
        {
            push(decoded_char, i, i + len, &mut decoded);
            i += len;
            continue;
        }
        push(c, i, i + c.len_utf8(), &mut decoded);
        i += c.len_utf8();
    }
    (decoded, spans)
}

/// The character the JSON escape at `text[i..]` (which starts with `\`) stands for, and
/// the escape's length.
fn escape_at(text: &str, i: usize) -> Option<(char, usize)> {
    let hex4 = |at: usize| {
        text.get(at..at + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let simple = match text.as_bytes().get(i + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let high = hex4(i + 2)?;
            if (0xD800..0xDC00).contains(&high) {
                // A surrogate pair: `\uD83D\uDE00`.
                let low = text
                    .get(i + 6..i + 8)
                    .filter(|u| *u == "\\u")
                    .and_then(|_| hex4(i + 8))
                    .filter(|l| (0xDC00..0xE000).contains(l))?;
                let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
                return Some((c, 12));
            }
            return Some((char::from_u32(high)?, 6));
        }
        _ => return None,
    };
    Some((simple, 2))
}

/// The base64 characters that encode only `bytes`, when `shift` bytes (0 to 2) precede
/// them in the encoded text. Character `i` covers bits `6i..6i+6`; the secret covers bits
/// `8 * shift .. 8 * (shift + len)`.
fn base64_core(engine: &impl base64::Engine, bytes: &[u8], shift: usize) -> String {
    let mut padded = vec![0u8; shift];
    padded.extend_from_slice(bytes);
    let encoded = engine.encode(&padded);
    let first = (8 * shift).div_ceil(6);
    let end = (8 * (shift + bytes.len())) / 6; // exclusive: last whole character + 1
    encoded.get(first..end).unwrap_or_default().to_owned()
}

/// Percent-encoding of every byte outside RFC 3986's unreserved set, upper-case escapes.
fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Lower-cases the hex digits of `%XX` escapes only.
trait LowercaseEscapes {
    fn to_lowercase_escapes(&self) -> String;
}

impl LowercaseEscapes for String {
    fn to_lowercase_escapes(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut left = 0;
        for c in self.chars() {
            if c == '%' {
                left = 2;
                out.push(c);
            } else if left > 0 {
                left -= 1;
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use treadle_event::Role;

    use super::*;

    const KEY: &str = "sk-test-9f8e7d6c5b4a?&/";

    fn secrets() -> Secrets {
        Secrets::new([KEY])
    }

    #[test]
    fn json_escaped_forms_are_masked_whole_or_in_part() {
        let all: String = KEY
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let upper: String = KEY
            .chars()
            .map(|c| format!("\\u{:04X}", c as u32))
            .collect();
        let part = KEY.replacen("test", "\\u0074est", 1).replace('/', "\\/");
        for written in [all, upper, part] {
            let text = format!("{{\"echo\": \"{written}\"}}");
            let clean = secrets().scrub(&text).into_owned();
            assert_eq!(clean, "{\"echo\": \"***\"}", "{text}");
        }
        // Escapes that spell nothing secret are left as written.
        let other = "{\"a\": \"\\u0041\\n\\uD83D\\uDE00\\x\"}";
        assert_eq!(secrets().scrub(other), other);
    }

    fn assert_clean(text: &str) {
        let clean = secrets().scrub(text).into_owned();
        assert!(!clean.contains(KEY), "{clean}");
        assert!(
            clean.contains(Secrets::MASK),
            "nothing masked in {text:?}: {clean}"
        );
    }

    #[test]
    fn plain_reversed_hex_and_percent_forms_are_masked() {
        let reversed: String = KEY.chars().rev().collect();
        let hex: String = KEY.bytes().map(|b| format!("{b:02x}")).collect();
        for text in [
            format!("the key is {KEY}."),
            format!("backwards: {reversed}"),
            format!("hex {hex}"),
            format!("HEX {}", hex.to_uppercase()),
            format!("url ?k={}", percent_encode(KEY.as_bytes())),
            format!(
                "url ?k={}",
                percent_encode(KEY.as_bytes()).to_lowercase_escapes()
            ),
        ] {
            assert_clean(&text);
        }
    }

    #[test]
    fn base64_is_masked_at_every_alignment_with_and_without_padding() {
        for engine in [&STANDARD, &URL_SAFE, &STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            for prefix in ["", "a", "ab", "abc", "key="] {
                for suffix in ["", "x", "xy\n"] {
                    let encoded = engine.encode(format!("{prefix}{KEY}{suffix}"));
                    let clean = secrets().scrub(&encoded).into_owned();
                    assert!(
                        clean.contains(Secrets::MASK),
                        "{prefix:?} {suffix:?}: {clean}"
                    );
                    // All but at most two edge characters of the key's encoding are gone.
                    let rest = clean.replace(Secrets::MASK, "");
                    assert!(rest.len() <= encoded.len() - (KEY.len() * 4 / 3 - 2));
                }
            }
        }
    }

    #[test]
    fn json_escapes_in_arguments_do_not_hide_a_key() {
        let escaped: String = KEY
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let args = format!(r#"{{"command": "echo {escaped}", "{KEY}": 1}}"#);
        let clean = secrets().scrub_arguments(&args);
        assert!(!clean.contains(KEY) && !clean.contains(&escaped), "{clean}");
        let value: serde_json::Value = serde_json::from_str(&clean).unwrap();
        assert_eq!(value["command"], "echo ***");
        // Arguments with nothing to scrub are kept byte for byte.
        let untouched = r#"{ "path" : "a.txt" }"#;
        assert_eq!(secrets().scrub_arguments(untouched), untouched);
    }

    #[test]
    fn messages_are_scrubbed_in_every_block() {
        let mut message = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: format!("here: {KEY}"),
                },
                Block::Reasoning {
                    text: KEY.chars().rev().collect(),
                },
                Block::ToolUse {
                    id: "c1".into(),
                    name: "run_shell".into(),
                    arguments: format!(r#"{{"command":"echo {KEY}"}}"#),
                },
            ],
        };
        assert!(secrets().scrub_message(&mut message));
        let json = serde_json::to_string(&message).unwrap();
        assert!(!json.contains(KEY) && !json.contains("4a?&/"), "{json}");
        assert!(
            !secrets().scrub_message(&mut message),
            "scrubbing is idempotent"
        );
    }

    #[test]
    fn short_values_and_ordinary_text_are_left_alone() {
        let secrets = Secrets::new(["abc", "  "]);
        assert!(secrets.is_empty());
        let text = "the quick brown fox";
        assert!(matches!(Secrets::new([KEY]).scrub(text), Cow::Borrowed(_)));
        assert!(!format!("{:?}", Secrets::new([KEY])).contains(KEY));
    }
}
