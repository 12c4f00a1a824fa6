//! Reading `codex exec --json` output into the step's [`Transcript`]: `thread.started`
//! names the session a later run resumes; `item.started` / `item.completed` carry its
//! shell commands (`run_shell`), its calls of the bridge's tools (under their own
//! names), its patches (`apply_patch`) and its messages; `turn.completed` ends the run
//! with the token counts of the whole thread so far (every run of the step), and
//! `turn.failed` ends it as an error.
//!
//! Kinds the reader does not know (reasoning, plans, a later CLI's new items) are skipped,
//! as for claude.

use serde::Deserialize;
use serde_json::{Value, json};
use treadle_event::Usage;

use super::stream::{Ended, Transcript};
use super::tools::BRIDGE;
use crate::agent::observe::AgentEvent;

/// One line of `codex exec --json`, as far as treadle reads it.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "thread.started")]
    ThreadStarted { thread_id: String },
    #[serde(rename = "item.started")]
    ItemStarted { item: Value },
    #[serde(rename = "item.completed")]
    ItemCompleted { item: Value },
    #[serde(rename = "turn.completed")]
    TurnCompleted {
        #[serde(default)]
        usage: TurnUsage,
    },
    #[serde(rename = "turn.failed")]
    TurnFailed {
        #[serde(default)]
        error: Value,
    },
    /// A stream error the CLI reports as it retries (`Reconnecting... 1/5`).
    #[serde(rename = "error")]
    Error {
        #[serde(default)]
        message: String,
    },
    #[serde(other)]
    Other,
}

/// The token counts of a turn (the Responses API's: cached input is part of the input,
/// reasoning is part of the output).
#[derive(Debug, Default, Deserialize)]
pub struct TurnUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl Transcript {
    /// What the step shows of one codex event.
    pub(super) fn codex(&mut self, event: Event) -> Vec<AgentEvent> {
        match event {
            Event::ThreadStarted { thread_id } => {
                self.session = Some(thread_id);
                Vec::new()
            }
            Event::ItemStarted { item } => self.item_started(&item).into_iter().collect(),
            Event::ItemCompleted { item } => self.item_completed(&item),
            Event::TurnCompleted { usage } => {
                // The counts are the thread's so far, a resumed run's included.
                self.usage = Usage {
                    prompt_tokens: usage.input_tokens,
                    completion_tokens: usage.output_tokens,
                    cached_tokens: usage.cached_input_tokens,
                };
                self.ended = Some(Ended {
                    subtype: "success".to_owned(),
                    result: Some(self.text.clone()),
                    session_id: self.session.clone(),
                    ..Ended::default()
                });
                Vec::new()
            }
            Event::TurnFailed { error } => {
                let message = error["message"]
                    .as_str()
                    .map_or_else(|| error.to_string(), str::to_owned);
                self.ended = Some(Ended {
                    subtype: "turn.failed".to_owned(),
                    is_error: true,
                    result: Some(message),
                    session_id: self.session.clone(),
                    ..Ended::default()
                });
                Vec::new()
            }
            Event::Error { message } => vec![AgentEvent::Notice(format!("codex: {message}"))],
            Event::Other => Vec::new(),
        }
    }

    /// A call that began: its name and arguments in treadle's terms. Each counts as one
    /// model message for `max_turns` (codex reports no model calls of its own).
    fn item_started(&mut self, item: &Value) -> Option<AgentEvent> {
        let id = item["id"].as_str();
        if id.is_some_and(|id| self.open.contains_key(id)) {
            return None;
        }
        let (name, arguments) = match item["type"].as_str()? {
            "command_execution" => ("run_shell".to_owned(), json!({"command": item["command"]})),
            "mcp_tool_call" => {
                let tool = item["tool"].as_str().unwrap_or_default();
                let name = match item["server"].as_str() {
                    Some(BRIDGE) => tool.to_owned(),
                    Some(server) => format!("mcp__{server}__{tool}"),
                    None => tool.to_owned(),
                };
                (name, item["arguments"].clone())
            }
            "file_change" => (
                "apply_patch".to_owned(),
                json!({"changes": item["changes"]}),
            ),
            _ => return None,
        };
        self.messages += 1;
        Some(self.started(id, name, arguments))
    }

    fn item_completed(&mut self, item: &Value) -> Vec<AgentEvent> {
        match item["type"].as_str() {
            Some("agent_message") => {
                self.messages += 1;
                self.said(item["text"].as_str().unwrap_or_default())
            }
            Some("error") => vec![AgentEvent::Notice(format!(
                "codex: {}",
                item["message"].as_str().unwrap_or_default()
            ))],
            Some("command_execution" | "mcp_tool_call" | "file_change") => {
                let mut out: Vec<AgentEvent> = self.item_started(item).into_iter().collect();
                let (content, is_error) = outcome(item);
                let id = item["id"].as_str().unwrap_or_default();
                out.extend(self.finished(id, content, is_error));
                out
            }
            _ => Vec::new(),
        }
    }
}

/// A finished call's result text and whether it failed.
fn outcome(item: &Value) -> (String, bool) {
    let failed = item["status"] == "failed";
    match item["type"].as_str() {
        Some("command_execution") => (
            item["aggregated_output"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            failed || item["exit_code"].as_i64().is_some_and(|c| c != 0),
        ),
        Some("mcp_tool_call") => {
            if let Some(message) = item["error"]["message"].as_str() {
                return (message.to_owned(), true);
            }
            let text = item["result"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            (text, failed || item["result"]["is_error"] == true)
        }
        _ => (item["changes"].to_string(), failed),
    }
}

#[cfg(test)]
mod tests {
    use super::super::driver::Cli;
    use super::*;

    #[test]
    fn a_command_and_a_bridged_call_are_shown_under_treadle_s_names_and_the_turn_counts() {
        let mut t = Transcript::default();
        t.read(
            Cli::Codex,
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
        );
        let shown = t.read(
            Cli::Codex,
            r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"cat a.txt","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
        );
        assert_eq!(
            shown,
            vec![AgentEvent::ToolCall {
                name: "run_shell".into(),
                arguments: json!({"command": "cat a.txt"})
            }]
        );
        let shown = t.read(
            Cli::Codex,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"cat a.txt","aggregated_output":"hello\n","exit_code":0,"status":"completed"}}"#,
        );
        assert!(
            matches!(&shown[..], [AgentEvent::ToolResult { name, content, is_error: false }] if name == "run_shell" && content == "hello\n"),
            "{shown:?}"
        );
        // A call reported only when done is shown as a call and its result.
        let shown = t.read(
            Cli::Codex,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"mcp_tool_call","server":"treadle","tool":"verdict","arguments":{"choice":"ship"},"result":{"content":[{"type":"text","text":"recorded"}]},"error":null,"status":"completed"}}"#,
        );
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert_eq!(t.calls[1].name, "verdict");
        assert_eq!(t.calls[1].result, "recorded");
        t.read(
            Cli::Codex,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"All done."}}"#,
        );
        t.read(
            Cli::Codex,
            r#"{"type":"turn.completed","usage":{"input_tokens":300,"cached_input_tokens":100,"output_tokens":30,"reasoning_output_tokens":0}}"#,
        );
        assert_eq!(t.session.as_deref(), Some("th-1"));
        assert_eq!(t.text, "All done.");
        assert_eq!(
            (
                t.usage.prompt_tokens,
                t.usage.cached_tokens,
                t.usage.completion_tokens
            ),
            (300, 100, 30)
        );
        assert_eq!(t.messages, 3);
        assert!(t.ended.as_ref().is_some_and(|e| !e.is_error));
        // A resumed run reports the thread's total, which replaces the first run's.
        t.read(
            Cli::Codex,
            r#"{"type":"turn.completed","usage":{"input_tokens":500,"cached_input_tokens":100,"output_tokens":40}}"#,
        );
        assert_eq!(
            (t.usage.prompt_tokens, t.usage.completion_tokens),
            (500, 40)
        );
    }

    #[test]
    fn a_failed_turn_ends_the_run_as_an_error_with_its_message() {
        let mut t = Transcript::default();
        t.read(
            Cli::Codex,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 401"}}"#,
        );
        let ended = t.ended.as_ref().expect("ended");
        assert!(ended.is_error);
        assert_eq!(ended.result.as_deref(), Some("unexpected status 401"));
    }
}
