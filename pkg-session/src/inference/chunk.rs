//! Tolerant chat-completion chunk types: every field optional, `null` and unknown fields
//! accepted, so quirky OpenAI-compatible servers stream without errors.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One `data:` payload of a streamed chat completion.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Chunk {
    pub model: Option<String>,
    #[serde(deserialize_with = "null_default")]
    pub choices: Vec<Choice>,
    /// Latest usage wins: most servers send it once at the end, some on every chunk.
    pub usage: Option<ChunkUsage>,
    /// OpenRouter and vLLM report a failure after the response started this way.
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Choice {
    #[serde(deserialize_with = "null_default")]
    pub index: u32,
    pub delta: Option<Delta>,
    /// `""` (sent by some servers on every chunk) means "not finished", like `null`.
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delta {
    pub content: Option<String>,
    /// DeepSeek, vLLM, llama.cpp.
    pub reasoning_content: Option<String>,
    /// OpenRouter and newer vLLM name the same thing `reasoning`. A separate field rather
    /// than a serde alias: an alias fails on servers that send both.
    pub reasoning: Option<String>,
    #[serde(deserialize_with = "null_default")]
    pub tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallDelta {
    /// Missing on some servers (Gemini's compatibility layer); see the stitcher.
    pub index: Option<u32>,
    pub id: Option<String>,
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FunctionDelta {
    pub name: Option<String>,
    /// Normally a string piece; a few servers send the whole arguments as a JSON object.
    #[serde(deserialize_with = "string_or_json")]
    pub arguments: Option<String>,
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

/// A string as is; any other JSON value (object, array, number) as its compact JSON text.
fn string_or_json<'de, D>(d: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(StringOrJson)
}

struct StringOrJson;

impl<'de> Visitor<'de> for StringOrJson {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let value = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(value.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let value = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Some(value.to_string()))
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

    fn parse(s: &str) -> Chunk {
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
        assert_eq!(c.choices[0].finish_reason.as_deref(), Some(""));
        let d = c.choices[0].delta.as_ref();
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
        let d = c.choices[0].delta.as_ref().map(|d| &d.tool_calls[0]);
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
