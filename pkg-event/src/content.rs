//! Conversation content: messages, their blocks, and token usage.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// Results of tool calls, answering the assistant message before them.
    Tool,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    /// Reasoning the model showed (for example `reasoning_content`); never sent back.
    Reasoning {
        text: String,
    },
    /// A tool call the model made. `arguments` holds the raw argument text as the model
    /// wrote it, which may not be valid JSON.
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    /// The answer to one tool call, which the model reads on its next step.
    ToolResult {
        call_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// A message of one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// A user message of one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// The concatenated text blocks (reasoning excluded).
    pub fn text_content(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Block::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = ToolUse<'_>> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse {
                id,
                name,
                arguments,
            } => Some(ToolUse {
                id,
                name,
                arguments,
            }),
            _ => None,
        })
    }
}

/// One tool call of an assistant message, as [`Message::tool_uses`] yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolUse<'a> {
    /// The call id the tool result answers.
    pub id: &'a str,
    /// The tool's name.
    pub name: &'a str,
    /// The arguments as the model wrote them (JSON text, possibly invalid).
    pub arguments: &'a str,
}

/// Tokens spent by one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// Prompt tokens the provider served from its cache (a subset of `prompt_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// Prompt plus completion tokens, under OpenAI's name for it.
    pub fn total_tokens(&self) -> u64 {
        self.total()
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.prompt_tokens += rhs.prompt_tokens;
        self.completion_tokens += rhs.completion_tokens;
        self.cached_tokens += rhs.cached_tokens;
    }
}
