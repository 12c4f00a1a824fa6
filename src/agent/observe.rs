//! What an agent step shows while it runs: [`AgentEvent`]s for the transcript (the task
//! that turns a session's event stream into them is `super::forward`). Tool results are
//! cut to [`PREVIEW_BYTES`] for display; the full result is in the step's
//! [`RecordedCall`](super::RecordedCall)s.

use serde_json::{Value, json};
use treadle_event::Usage;

/// How the session answers a call made after its turn's decision (treadle_session's
/// closing step): such a call did not fail, it was not run.
pub(crate) const NOT_RUN: &str = "not run:";

use super::cost::Cost;

/// The most bytes of a tool result an [`AgentEvent::ToolResult`] carries.
pub const PREVIEW_BYTES: usize = 2000;

/// The times of one model call, all in ms since the Unix epoch (`super::timing` reads
/// them from the session's stamps).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    /// The step's index in its turn (from 0).
    pub index: u32,
    /// When the request could go out.
    pub started_ms: Option<u64>,
    /// The first streamed piece (text or reasoning); `None` when nothing streamed.
    pub first_token_ms: Option<u64>,
    /// The answer complete.
    pub ended_ms: u64,
    /// Prompt tokens of this call.
    pub prompt_tokens: u64,
    /// Completion tokens of this call.
    pub completion_tokens: u64,
    /// The model that served it.
    pub model: String,
}

/// Something an agent step did, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A line of the model's text (without its newline).
    Text(String),
    /// The model called a tool.
    ToolCall {
        /// The tool.
        name: String,
        /// Its arguments (raw text as a JSON string when they did not parse).
        arguments: Value,
    },
    /// A tool call ended.
    ToolResult {
        /// The tool.
        name: String,
        /// The result, cut to [`PREVIEW_BYTES`].
        content: String,
        /// Whether the call failed or was refused.
        is_error: bool,
    },
    /// Something the step itself did, such as asking again for a verdict.
    Notice(String),
    /// The step's tokens and cost, once it ended.
    Usage {
        /// Tokens spent.
        usage: Usage,
        /// The model that served.
        model: String,
        /// What they cost.
        cost: Cost,
    },
    /// What the model was told: the system prompt (`role` `system`), or a turn's input
    /// (`user`: the step's prompt, then any reminder).
    Prompt {
        /// `system` or `user`.
        role: String,
        /// The text.
        text: String,
    },
    /// One model call's times and tokens (see `super::timing`).
    ModelCall(ModelCall),
    /// Something a sub-agent did, in its own session, while the step delegated to it.
    Nested {
        /// The sub-agent (`a/b` for `b` called by `a`).
        agent: String,
        /// What it did.
        event: Box<AgentEvent>,
    },
}

impl AgentEvent {
    /// The kind, as the transcript's `--json` lines name it.
    pub fn what(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::Notice(_) => "notice",
            Self::Usage { .. } => "usage",
            Self::Prompt { .. } => "prompt",
            Self::ModelCall(_) => "model_call",
            Self::Nested { event, .. } => event.what(),
        }
    }

    /// The content as JSON, for `--json` and the state file.
    pub fn data(&self) -> Value {
        match self {
            Self::Text(text) | Self::Notice(text) => Value::String(text.clone()),
            Self::ToolCall { name, arguments } => json!({"name": name, "arguments": arguments}),
            Self::ToolResult {
                name,
                content,
                is_error,
            } => json!({"name": name, "content": content, "is_error": is_error}),
            Self::Usage { usage, model, cost } => json!({
                "model": model,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cached_tokens": usage.cached_tokens,
                "cost_usd": cost.usd(),
            }),
            Self::Prompt { role, text } => json!({"role": role, "text": text}),
            Self::ModelCall(c) => json!({
                "index": c.index,
                "started_ms": c.started_ms,
                "first_token_ms": c.first_token_ms,
                "ended_ms": c.ended_ms,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "model": c.model,
            }),
            // The inner event's content with the sub-agent's name, which is what nests it
            // under the step on the run page; text becomes `{text, agent}`.
            Self::Nested { agent, event } => match event.data() {
                Value::Object(mut map) => {
                    map.insert("agent".to_owned(), Value::String(agent.clone()));
                    Value::Object(map)
                }
                other => json!({"text": other, "agent": agent}),
            },
        }
    }

    /// One human-readable line, for the plain transcript.
    pub fn summary(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::ToolCall { name, arguments } => format!("→ {name} {arguments}"),
            Self::ToolResult {
                name,
                content,
                is_error,
            } => {
                let first = content.lines().next().unwrap_or_default();
                let more = content.lines().count().saturating_sub(1);
                let rest = if more > 0 {
                    format!(" (+{more} lines)")
                } else {
                    String::new()
                };
                // A call made after the turn's decision was answered "not run" by the
                // session: nothing failed, so it is not marked as a failure.
                let mark = match (*is_error, content.starts_with(NOT_RUN)) {
                    (true, true) => "·",
                    (true, false) => "✗",
                    (false, _) => "←",
                };
                format!("{mark} {name}: {first}{rest}")
            }
            Self::Notice(text) => format!("! {text}"),
            Self::Usage { usage, model, cost } => format!(
                "{model}: {} prompt ({} cached) + {} completion tokens, {cost}",
                usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens
            ),
            // For the page and `--json` only: the plain transcript stays as it was.
            Self::Prompt { .. } | Self::ModelCall(_) => String::new(),
            Self::Nested { agent, event } => match **event {
                Self::Prompt { .. } | Self::ModelCall(_) => String::new(),
                _ => format!("[{agent}] {}", event.summary()),
            },
        }
    }
}

/// Receives an agent step's events as they happen. The executor implements it to write the
/// transcript; it is called from the step's own task, so it should not block for long.
pub trait AgentObserver: Send + Sync {
    /// One event.
    fn on_event(&self, event: AgentEvent);

    /// A piece of the model's text as it streams in, before it is gathered into lines (for
    /// live followers; the transcript shows whole lines through `on_event`).
    fn on_token(&self, _text: &str) {}
}

impl<F: Fn(AgentEvent) + Send + Sync> AgentObserver for F {
    fn on_event(&self, event: AgentEvent) {
        self(event);
    }
}

/// An observer that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl AgentObserver for Quiet {
    fn on_event(&self, _event: AgentEvent) {}
}

pub(super) fn preview(content: &str) -> String {
    crate::tools::truncate(content.to_owned(), PREVIEW_BYTES, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_render_for_humans_and_json() {
        let call = AgentEvent::ToolCall {
            name: "read_file".into(),
            arguments: json!({"path": "a"}),
        };
        assert_eq!(call.summary(), r#"→ read_file {"path":"a"}"#);
        assert_eq!(call.what(), "tool_call");
        let result = AgentEvent::ToolResult {
            name: "read_file".into(),
            content: "one\ntwo\nthree".into(),
            is_error: false,
        };
        assert_eq!(result.summary(), "← read_file: one (+2 lines)");
        let usage = AgentEvent::Usage {
            usage: Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                cached_tokens: 40,
            },
            model: "m".into(),
            cost: Cost::Unpriced,
        };
        assert_eq!(
            usage.summary(),
            "m: 100 prompt (40 cached) + 20 completion tokens, unpriced"
        );
        assert_eq!(usage.data()["cost_usd"], Value::Null);
        let nested = AgentEvent::Nested {
            agent: "lead/summarizer".into(),
            event: Box::new(AgentEvent::Text("an outage".into())),
        };
        assert_eq!(nested.what(), "text");
        assert_eq!(
            nested.data(),
            json!({"text": "an outage", "agent": "lead/summarizer"})
        );
        assert_eq!(nested.summary(), "[lead/summarizer] an outage");
        let call = AgentEvent::Nested {
            agent: "s".into(),
            event: Box::new(call),
        };
        assert_eq!(call.data()["agent"], "s");
        assert_eq!(call.data()["name"], "read_file");
    }
}
