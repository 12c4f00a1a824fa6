//! One MCP server tool as a [`Tool`]: naming, arguments, and turning results into text.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents};
use serde_json::Value;

use super::McpServer;
use crate::tool::{Tool, ToolError};

/// A tool of an MCP server, exposed as `{server}__{tool}`.
pub(super) struct McpTool {
    server: McpServer,
    /// The name the model sees.
    exposed: String,
    /// The name the server knows.
    remote: String,
    description: String,
    parameters: Value,
}

impl McpTool {
    pub(super) fn new(server: McpServer, tool: rmcp::model::Tool) -> Self {
        let exposed = exposed_name(server.name(), &tool.name);
        let description = tool
            .description
            .map(|d| d.into_owned())
            .or(tool.title)
            .unwrap_or_else(|| format!("Tool {} of MCP server {}.", tool.name, server.name()));
        Self {
            exposed,
            remote: tool.name.into_owned(),
            description,
            parameters: Value::Object(tool.input_schema.as_ref().clone()),
            server,
        }
    }
}

/// `{server}__{tool}`, with characters that function names may not hold replaced by `_`.
fn exposed_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.exposed
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn effect(&self) -> crate::Effect {
        let declared = self.server.config().effects.get(&self.remote).copied();
        declared.unwrap_or(crate::Effect::Effectful)
    }

    fn touches(&self, _arguments: &Value) -> crate::Footprint {
        // A declared tool writes (and may read) the places listed; an undeclared one may
        // touch anything, since MCP says nothing reliable about what a tool touches.
        match self.server.config().touches.get(&self.remote) {
            Some(places) => crate::Footprint::Only {
                reads: Vec::new(),
                writes: places.clone(),
            },
            None => crate::Footprint::Everything,
        }
    }

    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        let arguments: Option<JsonObject> = match arguments {
            Value::Object(object) => Some(object),
            // Models send `null` (or nothing, which the runtime parses as null) for tools
            // without parameters; MCP says to omit the arguments then.
            Value::Null => None,
            other => {
                return Err(ToolError::new(format!(
                    "the arguments of {} must be a JSON object, not {other}",
                    self.exposed
                )));
            }
        };
        self.server.call_tool(&self.remote, arguments).await
    }
}

/// The text the model reads for a call result; `isError: true` makes it an error.
pub(super) fn result_text(result: CallToolResult) -> Result<String, ToolError> {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error.unwrap_or(false) {
        if text.is_empty() {
            return Err(ToolError::new(
                "the MCP tool reported an error without saying what it was",
            ));
        }
        return Err(ToolError::new(text));
    }
    Ok(text)
}

/// Text blocks as they are; anything else as a bracketed note, since a chat-completions
/// tool result can only carry text.
fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[image: {}]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[audio: {}]", audio.mime_type),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, mime_type, .. } => match mime_type {
                Some(mime) => format!("[resource {uri}: {mime}]"),
                None => format!("[resource {uri}]"),
            },
            _ => "[resource]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
        // A block kind newer than the pinned rmcp knows.
        _ => "[unsupported content]".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_sanitized() {
        assert_eq!(exposed_name("fs", "read_file"), "fs__read_file");
        assert_eq!(exposed_name("my server", "a.b/c"), "my_server__a_b_c");
    }

    #[test]
    fn text_blocks_join_and_errors_map() {
        let ok = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(result_text(ok), Ok("a\nb".to_owned()));
        let err = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(result_text(err), Err(ToolError::new("boom")));
        let empty = CallToolResult::error(vec![]);
        assert!(result_text(empty).is_err());
    }
}
