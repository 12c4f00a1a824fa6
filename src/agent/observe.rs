//! What an agent step shows while it runs: [`AgentEvent`]s for the transcript, and the task
//! that turns a session's event stream into them.
//!
//! Text arrives from the model in small pieces; the forwarder gathers it into whole lines,
//! so a transcript prints one line per line of the answer rather than one per piece. Tool
//! results are cut to [`PREVIEW_BYTES`] for display; the full result is in the step's
//! [`RecordedCall`](super::RecordedCall)s.

use futures::StreamExt;
use serde_json::{Value, json};
use treadle_event::{DeltaKind, EventKind, Usage};
use treadle_session::{CatchUpItem, Subscription};

use super::catch_up::Shown;

use super::cost::Cost;
use super::record::parse_arguments;
use super::timing::{ModelCall, Timing};

/// The most bytes of a tool result an [`AgentEvent::ToolResult`] carries.
pub const PREVIEW_BYTES: usize = 2000;

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
                let mark = if *is_error { "✗" } else { "←" };
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

/// Where a forwarder reads a session's events.
pub(crate) enum Events {
    /// A session started for the step: live.
    Live(Subscription),
    /// A restored session: its journal, then live, showing each committed event once
    /// (see `super::catch_up`).
    Restored(treadle_session::CatchUp, Shown),
}

/// Follows a session's events until the subscription ends, showing them to `observer`.
/// Returns the model the endpoint last reported serving.
pub(crate) async fn forward(events: Events, observer: &dyn AgentObserver) -> Option<String> {
    let (mut events, mut shown) = match events {
        Events::Live(live) => (live.map(|d| d.map(CatchUpItem::Event)).boxed(), None),
        Events::Restored(read, shown) => (read.boxed(), Some(shown)),
    };
    let mut line = LineBuffer::default();
    let mut served = None;
    // Times are said only of what happens live: a restored session's journal is read
    // before it goes on, and its calls' times were said (or lost) by the process before.
    let mut timing = Timing::default();
    let mut live = shown.is_none();
    while let Some(item) = events.next().await {
        // A lost subscription only costs display: the outcome is read from the history.
        let Ok(item) = item else { break };
        let delivery = match item {
            CatchUpItem::Event(delivery) => delivery,
            CatchUpItem::CaughtUp { .. } => {
                if let Some(shown) = &mut shown {
                    shown.caught_up();
                }
                live = true;
                continue;
            }
        };
        if live {
            // Before the forwarder's own handling, so a turn's prompt precedes its text.
            if matches!(delivery.event.kind, EventKind::StepDone { .. }) {
                line.flush(observer);
            }
            timing.see(&delivery.event.kind, delivery.event.header.at_ms, observer);
        }
        match &delivery.event.kind {
            EventKind::TokenDelta {
                kind: DeltaKind::Text,
                text,
                ..
            } => {
                observer.on_token(text);
                line.push(text, observer);
            }
            EventKind::ToolCallStarted {
                call_id,
                name,
                arguments,
            } => {
                line.flush(observer);
                let call = AgentEvent::ToolCall {
                    name: name.clone(),
                    arguments: parse_arguments(arguments),
                };
                if shown
                    .as_mut()
                    .is_none_or(|s| s.call_started(call_id, &call))
                {
                    observer.on_event(call);
                }
            }
            EventKind::ToolCallCompleted {
                call_id,
                name,
                content,
                is_error,
            } => {
                let result = AgentEvent::ToolResult {
                    name: name.clone(),
                    content: preview(content),
                    is_error: *is_error,
                };
                if shown
                    .as_mut()
                    .is_none_or(|s| s.call_completed(call_id, &result))
                {
                    observer.on_event(result);
                }
            }
            EventKind::StepDone { model, .. } => {
                line.flush(observer);
                if let Some(shown) = &mut shown {
                    shown.committed(&delivery.event, observer);
                }
                if !model.is_empty() {
                    served = Some(model.clone());
                }
            }
            EventKind::GateOpened { .. } => {
                if let Some(shown) = &mut shown {
                    shown.committed(&delivery.event, observer);
                }
            }
            kind if kind.terminal().is_some() => line.flush(observer),
            _ => {}
        }
    }
    line.flush(observer);
    served
}

/// Gathers text pieces into lines.
#[derive(Default)]
struct LineBuffer(String);

impl LineBuffer {
    fn push(&mut self, text: &str, observer: &dyn AgentObserver) {
        self.0.push_str(text);
        while let Some(end) = self.0.find('\n') {
            let rest = self.0.split_off(end + 1);
            let mut done = std::mem::replace(&mut self.0, rest);
            done.truncate(end);
            observer.on_event(AgentEvent::Text(done));
        }
    }

    fn flush(&mut self, observer: &dyn AgentObserver) {
        if !self.0.is_empty() {
            observer.on_event(AgentEvent::Text(std::mem::take(&mut self.0)));
        }
    }
}

pub(super) fn preview(content: &str) -> String {
    crate::tools::truncate(content.to_owned(), PREVIEW_BYTES, "")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn text_pieces_become_lines() {
        let seen = Mutex::new(Vec::new());
        let observer = |e: AgentEvent| seen.lock().unwrap().push(e);
        let mut buffer = LineBuffer::default();
        buffer.push("Hel", &observer);
        buffer.push("lo\nwor", &observer);
        buffer.push("ld\n\nbye", &observer);
        buffer.flush(&observer);
        let lines: Vec<String> = seen
            .into_inner()
            .unwrap()
            .into_iter()
            .map(|e| e.summary())
            .collect();
        assert_eq!(lines, ["Hello", "world", "", "bye"]);
    }

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
