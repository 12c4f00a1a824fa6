//! Reading a coding-agent CLI's output as it arrives: each line parsed once (claude's
//! `stream-json` into a [`Line`] here, codex's JSONL events in `codex_stream`), turned
//! into the [`AgentEvent`]s a hosted agent's step shows, and gathered into what the
//! step's outcome needs ([`Transcript`]).
//!
//! Lines the reader does not know (hook events, progress, new kinds in a later CLI) are
//! skipped: they carry nothing the step records, and refusing them would tie treadle to
//! one CLI version.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use treadle_event::Usage;

use super::driver::Cli;
use super::tools::treadle_name;
use crate::agent::observe::{AgentEvent, PREVIEW_BYTES};
use crate::agent::record::RecordedCall;

/// One line of `--output-format stream-json`, as far as treadle reads it.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// `system` (`init` names the session and its tools).
    System {
        #[serde(default)]
        subtype: String,
        #[serde(default)]
        session_id: Option<String>,
    },
    /// One model message (text, tool uses).
    Assistant { message: Message },
    /// Tool results, sent back to the model.
    User { message: Message },
    /// The end of the CLI's turn: what it cost and how it ended.
    Result(Box<Ended>),
    /// Anything else.
    #[serde(other)]
    Other,
}

/// A message's content blocks.
#[derive(Debug, Deserialize)]
pub struct Message {
    #[serde(default)]
    content: Content,
}

/// Content is a string for a plain user prompt and a list of blocks otherwise.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Blocks(Vec<Value>),
    Text(#[allow(dead_code)] String),
}

impl Default for Content {
    fn default() -> Self {
        Self::Blocks(Vec::new())
    }
}

/// The `result` line.
#[derive(Debug, Default, Deserialize)]
pub struct Ended {
    /// `success`, `error_max_turns`, `error_max_budget_usd`, `error_during_execution`...
    #[serde(default)]
    pub subtype: String,
    #[serde(default)]
    pub is_error: bool,
    /// The final answer's text.
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// What the CLI says the whole session cost so far, in US dollars.
    #[serde(default)]
    pub total_cost_usd: f64,
    #[serde(default)]
    pub usage: ResultUsage,
}

/// Token counts of a `result` line (the Messages API's names).
#[derive(Debug, Default, Deserialize)]
pub struct ResultUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl ResultUsage {
    /// In treadle's terms: cached prompt tokens are part of the prompt tokens.
    pub fn usage(&self) -> Usage {
        let cached = self.cache_read_input_tokens;
        Usage {
            prompt_tokens: self.input_tokens + cached + self.cache_creation_input_tokens,
            completion_tokens: self.output_tokens,
            cached_tokens: cached,
        }
    }
}

/// What one or more CLI runs of a step did, gathered line by line.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The CLI's session, which a nudge resumes.
    pub session: Option<String>,
    /// Every tool call, in order, with its result once it came.
    pub calls: Vec<RecordedCall>,
    /// Where each open call is in `calls`, by the CLI's tool use id.
    pub(super) open: HashMap<String, usize>,
    /// The text of the last assistant message that had any.
    pub text: String,
    /// Model messages seen.
    pub messages: u32,
    /// How the current run ended (claude's `result` line; codex's end of turn).
    pub ended: Option<Ended>,
    /// Tokens of the runs that ended (claude's `result` counts its own run's, summed here;
    /// codex reports the thread's total).
    pub usage: Usage,
    /// Dollars of the runs that ended, as claude reports them (a resumed session reports
    /// its total again, so the largest total is kept rather than a sum). codex reports
    /// tokens only; its dollars are priced from `usage`.
    pub usd: f64,
}

impl Transcript {
    /// Reads one line of `cli`'s output and returns what the step shows of it. A line
    /// that is not JSON is shown as a notice (a CLI printing a warning on stdout).
    pub fn read(&mut self, cli: Cli, raw: &str) -> Vec<AgentEvent> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Vec::new();
        }
        let read = match cli {
            Cli::Claude => serde_json::from_str::<Line>(raw).map(|line| self.line(line)),
            Cli::Codex => serde_json::from_str(raw).map(|event| self.codex(event)),
        };
        read.unwrap_or_else(|_| vec![AgentEvent::Notice(format!("cli: {}", preview(raw)))])
    }

    fn line(&mut self, line: Line) -> Vec<AgentEvent> {
        match line {
            Line::System {
                subtype,
                session_id,
            } => {
                if subtype == "init" && session_id.is_some() {
                    self.session = session_id;
                }
                Vec::new()
            }
            Line::Assistant { message } => self.assistant(message),
            Line::User { message } => self.results(message),
            Line::Result(ended) => {
                self.usage += ended.usage.usage();
                self.usd = self.usd.max(ended.total_cost_usd);
                if let Some(s) = &ended.session_id {
                    self.session = Some(s.clone());
                }
                if let Some(text) = ended.result.as_ref().filter(|t| !t.is_empty()) {
                    self.text.clone_from(text);
                }
                self.ended = Some(*ended);
                Vec::new()
            }
            Line::Other => Vec::new(),
        }
    }

    fn assistant(&mut self, message: Message) -> Vec<AgentEvent> {
        self.messages += 1;
        let Content::Blocks(blocks) = message.content else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut text = String::new();
        for block in blocks {
            match block["type"].as_str() {
                Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
                Some("tool_use") => out.push(self.started(
                    block["id"].as_str(),
                    treadle_name(block["name"].as_str().unwrap_or_default()),
                    block["input"].clone(),
                )),
                _ => {}
            }
        }
        let mut said = self.said(&text);
        said.append(&mut out);
        said
    }

    fn results(&mut self, message: Message) -> Vec<AgentEvent> {
        let Content::Blocks(blocks) = message.content else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|block| {
                self.finished(
                    block["tool_use_id"].as_str()?,
                    result_text(&block["content"]),
                    block["is_error"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    }

    /// The model said `text`: its lines are shown, and it is the step's text so far.
    pub(super) fn said(&mut self, text: &str) -> Vec<AgentEvent> {
        if text.is_empty() {
            return Vec::new();
        }
        self.text = text.to_owned();
        text.lines()
            .map(|l| AgentEvent::Text(l.to_owned()))
            .collect()
    }

    /// A tool call began (`id` is the CLI's, which its result names).
    pub(super) fn started(
        &mut self,
        id: Option<&str>,
        name: String,
        arguments: Value,
    ) -> AgentEvent {
        if let Some(id) = id {
            self.open.insert(id.to_owned(), self.calls.len());
        }
        self.calls.push(RecordedCall {
            name: name.clone(),
            arguments: arguments.clone(),
            result: String::new(),
            is_error: false,
        });
        AgentEvent::ToolCall { name, arguments }
    }

    /// The call `id` came back; `None` for a call that is not open.
    pub(super) fn finished(
        &mut self,
        id: &str,
        content: String,
        is_error: bool,
    ) -> Option<AgentEvent> {
        let index = self.open.remove(id)?;
        let call = self.calls.get_mut(index)?;
        let shown = preview(&content);
        call.result = content;
        call.is_error = is_error;
        Some(AgentEvent::ToolResult {
            name: call.name.clone(),
            content: shown,
            is_error,
        })
    }
}

/// A tool result's text: a string, or the text blocks of a list.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `text` cut to [`PREVIEW_BYTES`] on a character boundary.
pub(super) fn preview(text: &str) -> String {
    if text.len() <= PREVIEW_BYTES {
        return text.to_owned();
    }
    let mut cut = PREVIEW_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_and_its_result_are_shown_under_treadle_s_names_and_recorded() {
        let mut t = Transcript::default();
        assert!(
            t.read(
                Cli::Claude,
                r#"{"type":"system","subtype":"init","session_id":"s-1","tools":["Read"]}"#
            )
            .is_empty()
        );
        let shown = t.read(
            Cli::Claude,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reading.\nNow."},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"a.txt"}}]}}"#,
        );
        assert_eq!(shown.len(), 3, "{shown:?}");
        assert_eq!(
            shown[2],
            AgentEvent::ToolCall {
                name: "read_file".into(),
                arguments: serde_json::json!({"file_path": "a.txt"})
            }
        );
        let shown = t.read(
            Cli::Claude,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"1\thello"}]}]}}"#,
        );
        assert!(
            matches!(&shown[0], AgentEvent::ToolResult { name, content, is_error: false } if name == "read_file" && content == "1\thello")
        );
        t.read(
            Cli::Claude,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"It says hello.","session_id":"s-1","total_cost_usd":0.25,"usage":{"input_tokens":90,"cache_read_input_tokens":10,"output_tokens":7},"num_turns":2}"#,
        );
        assert_eq!(t.session.as_deref(), Some("s-1"));
        assert_eq!(t.text, "It says hello.");
        assert_eq!(
            (
                t.usage.prompt_tokens,
                t.usage.cached_tokens,
                t.usage.completion_tokens
            ),
            (100, 10, 7)
        );
        assert_eq!(t.usd, 0.25);
        assert_eq!(t.calls[0].result, "1\thello");
    }

    #[test]
    fn a_line_that_is_not_json_is_a_notice_and_an_unknown_kind_is_skipped() {
        let mut t = Transcript::default();
        assert!(
            matches!(&t.read(Cli::Claude, "warning: something")[0], AgentEvent::Notice(n) if n.contains("something"))
        );
        assert!(
            t.read(Cli::Claude, r#"{"type":"stream_event","event":{}}"#)
                .is_empty()
        );
    }
}
