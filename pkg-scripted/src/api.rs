//! The wire formats answered besides chat completions, the Anthropic Messages API
//! (`POST /v1/messages`) and the OpenAI Responses API (`POST /v1/responses`): how each
//! counts the tool results of a conversation (the echo workload's turn), renders a reply,
//! and says that the script ran out. The handlers, in `server.rs`, are the same for both.

use serde_json::{Value, json};

use crate::render::Renderer;

/// How many `tool_result` blocks the conversation of a Messages request holds.
fn tool_results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |messages| {
        messages
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|block| block["type"] == "tool_result")
            .count()
    })
}

/// How many `function_call_output` items the input of a Responses request holds.
fn call_outputs(body: &Value) -> usize {
    body["input"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|item| item["type"] == "function_call_output")
            .count()
    })
}

/// One wire format besides chat completions: how its requests count tool results, how
/// its replies are rendered, and how it says that the script ran out.
pub(crate) struct Api {
    pub(crate) tool_results: fn(&Value) -> usize,
    pub(crate) render: Renderer,
    pub(crate) exhausted: fn(String) -> Value,
}

pub(crate) const MESSAGES: Api = Api {
    tool_results,
    render: crate::messages_render::render,
    exhausted: |message| json!({"type": "error", "error": {"type": "api_error", "message": message}}),
};

pub(crate) const RESPONSES: Api = Api {
    tool_results: call_outputs,
    render: crate::responses_render::render,
    exhausted: |message| json!({"error": {"type": "server_error", "message": message}}),
};
