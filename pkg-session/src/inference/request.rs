//! What one model call asks for, and the chat-completions JSON body built from it.

use serde_json::{Map, Value};
use treadle_event::{Block, Message, Role};

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

/// Builds the streaming chat-completions body for `request`.
pub(crate) fn build_body(
    model: &str,
    temperature: Option<f32>,
    request: &InferenceRequest,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert("messages".into(), Value::Array(messages(request)));
    body.insert("stream".into(), Value::Bool(true));
    body.insert(
        "stream_options".into(),
        object([("include_usage", Value::Bool(true))]),
    );
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(tool).collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
    }
    if let Some(format) = &request.response_format {
        body.insert("response_format".into(), format.clone());
    }
    if let Some(t) = temperature.and_then(temperature_number) {
        body.insert("temperature".into(), Value::Number(t));
    }
    Value::Object(body)
}

/// `0.7f32` widened to f64 is `0.699999988079071`; going through the shortest decimal
/// form sends `0.7`, which is what the user wrote. Non-finite values are not sent.
fn temperature_number(t: f32) -> Option<serde_json::Number> {
    let wide = t.to_string().parse::<f64>().unwrap_or(f64::from(t));
    serde_json::Number::from_f64(wide)
}

fn messages(request: &InferenceRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        out.push(role_text("system", system.clone()));
    }
    for message in &request.messages {
        match message.role {
            Role::System => out.push(role_text("system", message.text_content())),
            Role::User => out.push(role_text("user", message.text_content())),
            Role::Assistant => out.push(assistant(message)),
            // One wire message per result: the API pairs each with its call by id.
            Role::Tool => out.extend(message.content.iter().filter_map(tool_result)),
        }
    }
    out
}

fn role_text(role: &str, text: String) -> Value {
    object([
        ("role", Value::String(role.to_owned())),
        ("content", Value::String(text)),
    ])
}

fn assistant(message: &Message) -> Value {
    let text = message.text_content();
    let calls: Vec<Value> = message
        .tool_uses()
        .map(
            |treadle_event::ToolUse {
                 id,
                 name,
                 arguments,
             }| {
                object([
                    ("id", Value::String(id.to_owned())),
                    ("type", Value::String("function".to_owned())),
                    (
                        "function",
                        object([
                            ("name", Value::String(name.to_owned())),
                            ("arguments", Value::String(arguments.to_owned())),
                        ]),
                    ),
                ])
            },
        )
        .collect();
    let mut out = Map::new();
    out.insert("role".into(), Value::String("assistant".to_owned()));
    // `null` content is only valid beside tool calls; an assistant message with neither
    // text nor calls (e.g. reasoning only) sends "" so strict servers accept it.
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    out.insert("content".into(), content);
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

fn tool_result(block: &Block) -> Option<Value> {
    match block {
        Block::ToolResult {
            call_id, content, ..
        } => Some(object([
            ("role", Value::String("tool".to_owned())),
            ("tool_call_id", Value::String(call_id.clone())),
            ("content", Value::String(content.clone())),
        ])),
        _ => None,
    }
}

fn tool(spec: &ToolSpec) -> Value {
    object([
        ("type", Value::String("function".to_owned())),
        (
            "function",
            object([
                ("name", Value::String(spec.name.clone())),
                ("description", Value::String(spec.description.clone())),
                ("parameters", spec.parameters.clone()),
            ]),
        ),
    ])
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => Value::String("auto".to_owned()),
        ToolChoice::Required => Value::String("required".to_owned()),
        ToolChoice::None => Value::String("none".to_owned()),
        ToolChoice::Named(name) => object([
            ("type", Value::String("function".to_owned())),
            ("function", object([("name", Value::String(name.clone()))])),
        ]),
    }
}

fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
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

    #[test]
    fn body_shape() {
        let body = build_body("m", Some(0.7), &sample());
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
        let body = build_body("m", Some(f32::NAN), &request);
        let keys: Vec<&str> = body
            .as_object()
            .map_or(Vec::new(), |o| o.keys().map(String::as_str).collect());
        assert_eq!(keys, ["messages", "model", "stream", "stream_options"]);
    }

    #[test]
    fn choices_encode() {
        assert_eq!(tool_choice(&ToolChoice::Auto), json!("auto"));
        assert_eq!(tool_choice(&ToolChoice::Required), json!("required"));
        assert_eq!(tool_choice(&ToolChoice::None), json!("none"));
    }
}
