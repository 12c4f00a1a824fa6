//! Tolerant chat-completion chunk types: every field optional, `null` and unknown fields
//! accepted, so quirky OpenAI-compatible servers stream without errors. A chunk borrows its
//! strings from the event data it was parsed from when they hold no escape, so a piece of
//! text costs no allocation of its own.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::few::Few;

/// One `data:` payload of a streamed chat completion.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Chunk<'a> {
    #[serde(borrow, deserialize_with = "text")]
    pub model: Option<Cow<'a, str>>,
    /// Nearly always one: kept without a `Vec` (see [`Few`]).
    #[serde(borrow, deserialize_with = "null_default")]
    pub choices: Few<Choice<'a>>,
    /// Latest usage wins: most servers send it once at the end, some on every chunk.
    pub usage: Option<ChunkUsage>,
    /// OpenRouter and vLLM report a failure after the response started this way.
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Choice<'a> {
    #[serde(deserialize_with = "null_default")]
    pub index: u32,
    #[serde(borrow)]
    pub delta: Option<Delta<'a>>,
    /// `""` (sent by some servers on every chunk) means "not finished", like `null`.
    #[serde(borrow, deserialize_with = "text")]
    pub finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delta<'a> {
    #[serde(borrow, deserialize_with = "text")]
    pub content: Option<Cow<'a, str>>,
    /// DeepSeek, vLLM, llama.cpp.
    #[serde(borrow, deserialize_with = "text")]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// OpenRouter and newer vLLM name the same thing `reasoning`. A separate field rather
    /// than a serde alias: an alias fails on servers that send both.
    #[serde(borrow, deserialize_with = "text")]
    pub reasoning: Option<Cow<'a, str>>,
    /// Nearly always none or one: kept without a `Vec` (see [`Few`]).
    #[serde(borrow, deserialize_with = "null_default")]
    pub tool_calls: Few<ToolCallDelta<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallDelta<'a> {
    /// Missing on some servers (Gemini's compatibility layer); see the stitcher.
    pub index: Option<u32>,
    #[serde(borrow, deserialize_with = "text")]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FunctionDelta<'a> {
    #[serde(borrow, deserialize_with = "text")]
    pub name: Option<Cow<'a, str>>,
    /// Normally a string piece; a few servers send the whole arguments as a JSON object.
    #[serde(borrow, deserialize_with = "string_or_json")]
    pub arguments: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
pub(crate) struct ChunkUsage {
    #[serde(deserialize_with = "null_default")]
    pub prompt_tokens: u64,
    #[serde(deserialize_with = "null_default")]
    pub completion_tokens: u64,
    pub prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek's name for cached prompt tokens.
    pub prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
pub(crate) struct PromptDetails {
    pub cached_tokens: Option<u64>,
}

impl ChunkUsage {
    pub fn to_usage(self) -> treadle_event::Usage {
        let cached = self
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0);
        treadle_event::Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: cached,
        }
    }
}

/// `null` (or absence, with `#[serde(default)]`) becomes the type's default.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// An optional string, borrowed from the input when it holds no escape. (serde's own
/// `Cow` support borrows only a bare `Cow<str>` field, not one inside an `Option`.)
fn text<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_option(Text { any_json: false })
}

/// A string as is; any other JSON value (object, array, number) as its compact JSON text.
fn string_or_json<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(Text { any_json: true })
}

/// Visits a string (or, with `any_json`, any JSON value) for [`text`] and
/// [`string_or_json`].
struct Text {
    any_json: bool,
}

impl Text {
    fn other<E: de::Error>(
        &self,
        value: String,
        unexpected: de::Unexpected<'_>,
    ) -> Result<Option<Cow<'static, str>>, E> {
        if self.any_json {
            Ok(Some(Cow::Owned(value)))
        } else {
            Err(E::invalid_type(unexpected, self))
        }
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.any_json {
            "a string or JSON value"
        } else {
            "a string or null"
        })
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v)))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.any_json {
            d.deserialize_any(self)
        } else {
            d.deserialize_str(self)
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.other(v.to_string(), de::Unexpected::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.other(v.to_string(), de::Unexpected::Signed(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.other(v.to_string(), de::Unexpected::Unsigned(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.other(v.to_string(), de::Unexpected::Float(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        if !self.any_json {
            return Err(de::Error::invalid_type(de::Unexpected::Map, &self));
        }
        let value = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(Cow::Owned(value.to_string())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        if !self.any_json {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let value = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Some(Cow::Owned(value.to_string())))
    }
}

/// Whether `data` is valid JSON at all; decides between "not JSON" and "wrong shape" in
/// error details. Only called on the error path.
pub(crate) fn is_json(data: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(data).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Chunk<'_> {
        match serde_json::from_str(s) {
            Ok(c) => c,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn quirks_parse() {
        let c = parse(
            r#"{"id":"x","object":"chat.completion.chunk","model":"m","x":{"y":[1]},
                "choices":[{"index":0,"finish_reason":"","logprobs":null,
                  "delta":{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":null}}],
                "usage":null}"#,
        );
        assert_eq!(c.model.as_deref(), Some("m"));
        let choice = c.choices.first();
        assert_eq!(choice.and_then(|c| c.finish_reason.as_deref()), Some(""));
        let d = choice.and_then(|c| c.delta.as_ref());
        assert_eq!(d.and_then(|d| d.reasoning_content.as_deref()), Some("r"));
        assert!(c.usage.is_none());
    }

    #[test]
    fn usage_only_and_empty() {
        let c = parse(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":null,
                "prompt_tokens_details":{"cached_tokens":2}}}"#,
        );
        let u = c.usage.map(ChunkUsage::to_usage).unwrap_or_default();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (3, 0, 2)
        );
        let c = parse(r#"{"choices":null}"#);
        assert!(c.choices.is_empty());
        parse("{}");
    }

    #[test]
    fn arguments_as_object() {
        let c = parse(
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":{"k":1}}}]}}]}"#,
        );
        let d = c
            .choices
            .first()
            .and_then(|c| c.delta.as_ref())
            .and_then(|d| d.tool_calls.first());
        let args = d
            .and_then(|t| t.function.as_ref())
            .and_then(|f| f.arguments.as_deref());
        assert_eq!(args, Some(r#"{"k":1}"#));
        assert_eq!(d.and_then(|t| t.index), None);
    }

    #[test]
    fn json_check() {
        assert!(is_json("{\"a\":1}"));
        assert!(!is_json("{not json"));
    }
}
