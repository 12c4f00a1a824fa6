//! [`SeededCall`]: a tool call and its result that a turn starts with, as though the model
//! had made the call itself ([`TurnRequest::seeded`](crate::TurnRequest::seeded)).
//!
//! What a caller hands over this way (the files a task must follow, another step's
//! decision) is in the conversation from the first model call, without a turn spent asking
//! for it and without depending on the model choosing to ask. The exchange follows the
//! turn's input (an assistant message calling the tool, then its result), because a tool
//! exchange only ever answers a request: a chat template may refuse a conversation whose
//! first assistant message is a tool call nobody asked for.
//!
//! The turn commits the exchange through its loop actor as its first step (rule 1), with
//! no model call and no usage, so a restore rebuilds it like any step (rule 9). It is not
//! charged to the turn's step limit and not counted in [`TurnReport::steps`], which count
//! model calls; a turn restored while it was in flight counts it once more.
//!
//! [`TurnReport::steps`]: crate::TurnReport

use treadle_event::{Block, Message, Role};

/// One tool call and its result, handed to the model as though it had made the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededCall {
    /// The call's id. The caller chooses it, so that it can tell its own calls apart from
    /// the model's in the history (they are committed like any other).
    pub id: String,
    /// The tool's name, as the model would call it.
    pub name: String,
    /// The call's arguments, a JSON object.
    pub arguments: serde_json::Value,
    /// The result the model reads, as the tool would have answered.
    pub result: String,
}

impl SeededCall {
    /// A call of `name` with `arguments`, answered by `result`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
        result: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            result: result.into(),
        }
    }
}

/// The messages of `seed`: for each call, the assistant message that makes it and the tool
/// message that answers it, in order.
pub(crate) fn messages(seed: Vec<SeededCall>) -> Vec<Message> {
    seed.into_iter()
        .flat_map(|call| {
            [
                Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolUse {
                        id: call.id.clone(),
                        name: call.name,
                        arguments: call.arguments.to_string(),
                    }],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult {
                        call_id: call.id,
                        content: call.result,
                        is_error: false,
                    }],
                },
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_is_an_assistant_call_then_its_result() {
        let seed = vec![
            SeededCall::new("a", "read_file", serde_json::json!({"path": "x"}), "X"),
            SeededCall::new("b", "read_file", serde_json::json!({"path": "y"}), "Y"),
        ];
        let messages = messages(seed);
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::Assistant, Role::Tool, Role::Assistant, Role::Tool]
        );
        let uses: Vec<_> = messages.iter().flat_map(Message::tool_uses).collect();
        assert_eq!(uses[1].id, "b");
        assert_eq!(uses[1].arguments, r#"{"path":"y"}"#);
        assert!(matches!(
            &messages[3].content[0],
            Block::ToolResult { call_id, content, is_error: false } if call_id == "b" && content == "Y"
        ));
    }
}
