//! What the server reads of a request: [`RequestInfo`], from a parsed body or parsed
//! lightly (only the fields it acts on) when nothing else needs the body.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

/// The request fields the server acts on.
pub(crate) struct RequestInfo<'a> {
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) model: Cow<'a, str>,
    pub(crate) tool_messages: usize,
}

impl<'a> RequestInfo<'a> {
    pub(crate) fn from_value(v: &'a Value) -> Self {
        Self {
            stream: v["stream"].as_bool().unwrap_or(false),
            include_usage: v["stream_options"]["include_usage"]
                .as_bool()
                .unwrap_or(false),
            model: Cow::Borrowed(v["model"].as_str().unwrap_or("scripted")),
            tool_messages: v["messages"]
                .as_array()
                .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count()),
        }
    }
}

/// Parses only what [`RequestInfo`] needs, skipping the rest without building values.
#[derive(Deserialize)]
pub(crate) struct LightRequest<'a> {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<LightStreamOptions>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    messages: Option<Vec<LightMessage<'a>>>,
}

#[derive(Deserialize)]
struct LightStreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct LightMessage<'a> {
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
}

impl<'a> From<LightRequest<'a>> for RequestInfo<'a> {
    fn from(r: LightRequest<'a>) -> Self {
        Self {
            stream: r.stream.unwrap_or(false),
            include_usage: r
                .stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            model: r.model.unwrap_or(Cow::Borrowed("scripted")),
            tool_messages: r.messages.map_or(0, |m| {
                m.iter()
                    .filter(|m| m.role.as_deref() == Some("tool"))
                    .count()
            }),
        }
    }
}
