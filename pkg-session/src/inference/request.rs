//! What one model call asks for, and the chat-completions JSON body built from it.
//!
//! The body is serialized straight from borrowed wire structs, with no `serde_json::Value`
//! tree in between; a turn's [`PreparedRequest`] keeps each message's encoding, so only
//! what a step adds is encoded on that step.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use treadle_event::{Block, Message, Role};

use crate::history::History;

/// A tool the model may call, described by a JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The function name the model uses to call it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (`"auto"`).
    Auto,
    /// The model must call some tool (`"required"`).
    Required,
    /// The model must not call tools (`"none"`).
    None,
    /// The model must call this tool.
    Named(String),
}

/// One model call: the conversation so far and the tools on offer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InferenceRequest {
    /// The system prompt, sent first.
    pub system: Option<String>,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call; none when empty.
    pub tools: Vec<ToolSpec>,
    /// Tool choice; the server's default (auto) when `None`. Not sent without tools,
    /// since servers reject a tool choice with no tools.
    pub tool_choice: Option<ToolChoice>,
    /// Sent as `response_format` when set, e.g. `{"type": "json_schema", ...}`.
    pub response_format: Option<Value>,
}

/// A request with its wire form kept beside it: each message is encoded once, when it joins
/// the conversation, and every body is the kept bytes spliced between the fixed parts. The
/// conversation only grows (or is replaced whole, by compaction), so a step's encoding
/// costs what the step adds, not the whole history. A turn holds one for its life.
pub(crate) struct PreparedRequest {
    /// The request as it stands, but for its messages, which are in `history`.
    request: InferenceRequest,
    /// The conversation, in the groups it was committed in: a step's group is shared with
    /// the loop's history and the step's `StepDone`, not copied (see `history.rs`).
    history: History,
    /// The system prompt and every message of `history`, as wire messages.
    messages: Vec<Box<RawValue>>,
    tools: Option<Box<RawValue>>,
    tool_choice: Option<Box<RawValue>>,
    response_format: Option<Box<RawValue>>,
}

impl From<InferenceRequest> for PreparedRequest {
    fn from(request: InferenceRequest) -> Self {
        Self::new(request)
    }
}

impl PreparedRequest {
    pub(crate) fn new(mut request: InferenceRequest) -> Self {
        let history = History::from(std::mem::take(&mut request.messages));
        Self::with_history(request, history)
    }

    /// A request of `history` (shared, not copied) after `request`'s own messages.
    pub(crate) fn with_history(mut request: InferenceRequest, history: History) -> Self {
        let mut joined = History::from(std::mem::take(&mut request.messages));
        joined.append(&history);
        let mut messages = Vec::with_capacity(joined.len() + 1);
        encode_history(request.system.as_deref(), joined.iter(), &mut messages);
        // Servers reject a tool choice with no tools, so neither is sent without tools.
        let (tools, tool_choice) = if request.tools.is_empty() {
            (None, None)
        } else {
            let tools: Vec<WireTool<'_>> = request.tools.iter().map(WireTool::of).collect();
            let choice = request
                .tool_choice
                .as_ref()
                .map(|c| raw(&WireChoice::of(c)));
            (Some(raw(&tools)), choice)
        };
        let response_format = request.response_format.as_ref().map(raw);
        Self {
            request,
            history: joined,
            messages,
            tools,
            tool_choice,
            response_format,
        }
    }

    /// Lets the model choose again: no `tool_choice` is sent from now on.
    pub(crate) fn clear_tool_choice(&mut self) {
        self.request.tool_choice = None;
        self.tool_choice = None;
    }

    /// Whether tools are offered.
    pub(crate) fn offers_tools(&self) -> bool {
        !self.request.tools.is_empty()
    }

    /// Whether the answer is asked for in a shape of its own (`response_format`).
    pub(crate) fn has_response_format(&self) -> bool {
        self.request.response_format.is_some()
    }

    /// The conversation, oldest first.
    pub(crate) fn messages(&self) -> &History {
        &self.history
    }

    /// Appends a step's `group` of messages to the conversation, encoding only them and
    /// sharing the group.
    pub(crate) fn extend(&mut self, group: Arc<[Message]>) {
        for message in group.iter() {
            encode_message(message, &mut self.messages);
        }
        self.history.push_group(group);
    }

    /// Replaces the whole conversation (a compaction), encoding it anew.
    pub(crate) fn replace_messages(&mut self, messages: Vec<Message>) {
        self.messages.clear();
        encode_history(
            self.request.system.as_deref(),
            messages.iter(),
            &mut self.messages,
        );
        self.history = History::from(messages);
    }

    /// About how many bytes the encoded body takes: the encoded parts plus room for the
    /// fixed fields, so that the body is written into one buffer without regrowing it.
    pub(crate) fn encoded_len_hint(&self) -> usize {
        let raw = |part: &Option<Box<RawValue>>| part.as_ref().map_or(0, |p| p.get().len());
        let messages: usize = self.messages.iter().map(|m| m.get().len() + 1).sum();
        messages + raw(&self.tools) + raw(&self.tool_choice) + raw(&self.response_format) + 512
    }

    /// The streaming chat-completions body for `model`, borrowing the encoded parts.
    pub(crate) fn body<'a>(&'a self, model: &'a str, sampling: &'a Sampling) -> Body<'a> {
        Body {
            model,
            messages: &self.messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            tools: self.tools.as_deref(),
            tool_choice: self.tool_choice.as_deref(),
            response_format: self.response_format.as_deref(),
            temperature: sampling.temperature.and_then(temperature_number),
            top_p: sampling.top_p.and_then(temperature_number),
            max_tokens: sampling.max_tokens,
            reasoning_effort: sampling.reasoning_effort.as_deref(),
        }
    }
}

/// The sampling dials a client sends with every request; each left out when `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
}

/// The body of one streaming chat-completions call: fixed fields around wire parts encoded
/// beforehand, serialized once, straight into the HTTP request's buffer.
#[derive(Serialize)]
pub(crate) struct Body<'a> {
    model: &'a str,
    messages: &'a [Box<RawValue>],
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// `0.7f32` widened to f64 is `0.699999988079071`; going through the shortest decimal
/// form sends `0.7`, which is what the user wrote. Non-finite values are not sent. (The
/// same for `top_p`.)
fn temperature_number(t: f32) -> Option<serde_json::Number> {
    let wide = t.to_string().parse::<f64>().unwrap_or(f64::from(t));
    serde_json::Number::from_f64(wide)
}

/// The system prompt (if any), then each message, as wire messages.
fn encode_history<'m>(
    system: Option<&str>,
    messages: impl Iterator<Item = &'m Message>,
    out: &mut Vec<Box<RawValue>>,
) {
    if let Some(system) = system {
        out.push(raw(&WireText::new("system", system)));
    }
    for message in messages {
        encode_message(message, out);
    }
}

/// The wire messages of one message: one, or one per tool result (the API pairs each
/// result with its call by id).
fn encode_message(message: &Message, out: &mut Vec<Box<RawValue>>) {
    match message.role {
        Role::System => out.push(raw(&WireText::new("system", &message.text_content()))),
        Role::User => out.push(raw(&WireText::new("user", &message.text_content()))),
        Role::Assistant => out.push(raw(&WireAssistant::of(message, &message.text_content()))),
        Role::Tool => out.extend(message.content.iter().filter_map(|block| match block {
            Block::ToolResult {
                call_id, content, ..
            } => Some(raw(&WireResult {
                role: "tool",
                tool_call_id: call_id,
                content,
            })),
            _ => None,
        })),
    }
}

/// `value` as JSON. Serializing strings, numbers and `Value`s into memory cannot fail; were
/// it to, that part is sent as `null`, which the server refuses with an error the step
/// reports, rather than the process panicking.
fn raw<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value)
        .inspect_err(|error| tracing::error!(%error, "cannot encode part of a model request"))
        .unwrap_or_default()
}

#[derive(Serialize)]
struct WireText<'a> {
    role: &'static str,
    content: &'a str,
}

impl<'a> WireText<'a> {
    fn new(role: &'static str, content: &'a str) -> Self {
        Self { role, content }
    }
}

#[derive(Serialize)]
struct WireAssistant<'a> {
    role: &'static str,
    /// `null` only beside tool calls; an assistant message with neither text nor calls
    /// (e.g. reasoning only) sends "" so strict servers accept it.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
}

impl<'a> WireAssistant<'a> {
    fn of(message: &'a Message, text: &'a str) -> Self {
        let tool_calls: Vec<WireCall<'a>> = message
            .tool_uses()
            .map(|use_| WireCall {
                id: use_.id,
                kind: "function",
                function: WireFunction {
                    name: use_.name,
                    arguments: use_.arguments,
                },
            })
            .collect();
        let content = (!text.is_empty() || tool_calls.is_empty()).then_some(text);
        Self {
            role: "assistant",
            content,
            tool_calls,
        }
    }
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireResult<'a> {
    role: &'static str,
    tool_call_id: &'a str,
    content: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> WireTool<'a> {
    fn of(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireToolFunction {
                name: &spec.name,
                description: &spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireName<'a>,
    },
}

#[derive(Serialize)]
struct WireName<'a> {
    name: &'a str,
}

impl<'a> WireChoice<'a> {
    fn of(choice: &'a ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => Self::Mode("auto"),
            ToolChoice::Required => Self::Mode("required"),
            ToolChoice::None => Self::Mode("none"),
            ToolChoice::Named(name) => Self::Named {
                kind: "function",
                function: WireName { name },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample() -> InferenceRequest {
        InferenceRequest {
            system: Some("be brief".into()),
            messages: vec![
                Message::user("hi"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Reasoning { text: "hmm".into() },
                        Block::ToolUse {
                            id: "c1".into(),
                            name: "read".into(),
                            arguments: r#"{"p":1}"#.into(),
                        },
                        Block::ToolUse {
                            id: "c2".into(),
                            name: "ls".into(),
                            arguments: "{}".into(),
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    content: vec![
                        Block::ToolResult {
                            call_id: "c1".into(),
                            content: "one".into(),
                            is_error: false,
                        },
                        Block::ToolResult {
                            call_id: "c2".into(),
                            content: "two".into(),
                            is_error: true,
                        },
                    ],
                },
                Message::text(Role::Assistant, "done"),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: Some(ToolChoice::Named("read".into())),
            response_format: None,
        }
    }

    /// The body as JSON, through the same serialization the client sends.
    fn body_of(request: InferenceRequest, temperature: Option<f32>) -> Value {
        let prepared = PreparedRequest::new(request);
        let sampling = Sampling {
            temperature,
            ..Sampling::default()
        };
        serde_json::to_value(prepared.body("m", &sampling)).unwrap_or(Value::Null)
    }

    #[test]
    fn the_length_hint_covers_the_encoded_body() {
        let prepared = PreparedRequest::new(sample());
        let sampling = Sampling {
            temperature: Some(0.7),
            top_p: Some(0.9),
            max_tokens: Some(100),
            reasoning_effort: Some("high".into()),
        };
        let encoded =
            serde_json::to_vec(&prepared.body("some-model-name", &sampling)).unwrap_or_default();
        assert!(encoded.len() > 100, "{}", encoded.len());
        let hint = prepared.encoded_len_hint();
        assert!(
            hint >= encoded.len() && hint <= encoded.len() + 512,
            "{hint}"
        );
    }

    #[test]
    fn the_other_dials_are_sent_when_set() {
        let prepared = PreparedRequest::new(sample());
        let sampling = Sampling {
            temperature: None,
            top_p: Some(0.9),
            max_tokens: Some(256),
            reasoning_effort: Some("low".into()),
        };
        let body = serde_json::to_value(prepared.body("m", &sampling)).unwrap_or(Value::Null);
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["max_tokens"], json!(256));
        assert_eq!(body["reasoning_effort"], json!("low"));
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn body_shape() {
        let body = body_of(sample(), Some(0.7));
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.7,
                "tool_choice": {"type": "function", "function": {"name": "read"}},
                "tools": [{"type": "function", "function": {
                    "name": "read", "description": "reads", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}},
                        {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "one"},
                    {"role": "tool", "tool_call_id": "c2", "content": "two"},
                    {"role": "assistant", "content": "done"},
                ],
            })
        );
    }

    #[test]
    fn no_tools_no_choice_no_temperature() {
        let request = InferenceRequest {
            messages: vec![Message::user("x")],
            tool_choice: Some(ToolChoice::Auto),
            ..Default::default()
        };
        let body = body_of(request, Some(f32::NAN));
        let mut keys: Vec<&str> = body
            .as_object()
            .map_or(Vec::new(), |o| o.keys().map(String::as_str).collect());
        keys.sort_unstable();
        assert_eq!(keys, ["messages", "model", "stream", "stream_options"]);
    }

    #[test]
    fn choices_encode() {
        let encode = |choice: &ToolChoice| {
            serde_json::to_value(WireChoice::of(choice)).unwrap_or(Value::Null)
        };
        assert_eq!(encode(&ToolChoice::Auto), json!("auto"));
        assert_eq!(encode(&ToolChoice::Required), json!("required"));
        assert_eq!(encode(&ToolChoice::None), json!("none"));
    }

    /// A conversation grown step by step encodes exactly as the whole conversation encoded
    /// at once, and so does one replaced by a compaction.
    #[test]
    fn extended_and_replaced_match_a_fresh_encoding() {
        let whole = sample();
        let mut grown = PreparedRequest::new(InferenceRequest {
            messages: whole.messages[..1].to_vec(),
            ..whole.clone()
        });
        for message in &whole.messages[1..] {
            grown.extend(Arc::from([message.clone()]));
        }
        let fresh = PreparedRequest::new(whole.clone());
        let json =
            |p: &PreparedRequest| serde_json::to_string(&p.body("m", &Sampling::default())).ok();
        assert_eq!(json(&grown), json(&fresh));
        assert_eq!(grown.messages().to_vec(), whole.messages);

        grown.replace_messages(vec![Message::user("summary")]);
        let replaced = PreparedRequest::new(InferenceRequest {
            messages: vec![Message::user("summary")],
            ..whole
        });
        assert_eq!(json(&grown), json(&replaced));
    }
}
