//! What an agent step leaves behind: its [`AgentOutcome`], the [`RecordedCall`]s it made,
//! and how they are read back from a session's committed history.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use treadle_event::{Block, FailureCause, Message, Role, Usage};

use super::cost::Cost;

/// One tool call the agent made, with the result it read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON. Arguments that were not valid JSON are kept as a JSON string
    /// holding the raw text, so nothing the model wrote is lost.
    pub arguments: serde_json::Value,
    /// The result the model read (or the error message, when `is_error`).
    pub result: String,
    /// Whether the call failed or was refused.
    pub is_error: bool,
}

/// How an agent step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AgentStatus {
    /// The turn ended with an answer (and a valid verdict, when verdicts were asked for).
    Succeeded,
    /// The model, the endpoint or the session failed the turn.
    Failed {
        /// What went wrong.
        error: String,
        /// Whose failure it was: the model endpoint and the journal are infrastructure;
        /// a limit or a denial is the step's own failure.
        cause: FailureCause,
    },
    /// A token budget was spent; no further model call was made.
    BudgetExceeded {
        /// Tokens spent when the next call was refused.
        spent: u64,
        /// The budget that was reached.
        limit: u64,
        /// Which budget: `step` or `job`.
        scope: String,
    },
    /// Verdicts were asked for and the agent did not give a valid one, even when reminded.
    NoVerdict {
        /// The verdicts it was asked to pick from.
        allowed: Vec<String>,
    },
    /// The step was cancelled (Ctrl-C or its timeout) while the turn ran.
    Interrupted {
        /// Why.
        reason: String,
    },
    /// A dollar budget was spent; no further model call was made.
    DollarBudgetExceeded {
        /// Dollars spent when the next call was refused (`None`: the model has no price).
        spent_usd: Option<f64>,
        /// The budget that was reached.
        limit_usd: f64,
        /// Which budget: `step` or `job`.
        scope: String,
    },
    /// `output_schema:` was not met, even after the model was told why once.
    InvalidOutput {
        /// Why the second answer does not fit.
        reason: String,
    },
    /// A custom tool with `required: true` never succeeded, even after reminders.
    RequiredToolMissing {
        /// The tools that never succeeded.
        tools: Vec<String>,
    },
    /// A verdict below `min_confidence:` went to a person, who rejected it.
    EscalationRejected {
        /// The verdict that was rejected.
        verdict: String,
        /// Who rejected it (`headless`, `timeout`, a user name).
        by: String,
    },
}

impl AgentStatus {
    /// Whether the step succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Succeeded)
    }

    /// A one-line reason for a failure, `None` on success.
    pub fn error(&self) -> Option<String> {
        match self {
            Self::Succeeded => None,
            Self::Failed { error, .. } => Some(error.clone()),
            Self::BudgetExceeded {
                spent,
                limit,
                scope,
            } => Some(format!(
                "{scope} token budget spent ({spent} of {limit} tokens); no further model call was made"
            )),
            Self::RequiredToolMissing { tools } => Some(format!(
                "required tool(s) never succeeded: {}",
                tools.join(", ")
            )),
            Self::NoVerdict { allowed } => Some(format!(
                "the agent did not call the verdict tool with one of: {}",
                allowed.join(", ")
            )),
            Self::Interrupted { reason } => Some(format!("interrupted: {reason}")),
            Self::DollarBudgetExceeded {
                spent_usd,
                limit_usd,
                scope,
            } => Some(match spent_usd {
                Some(spent) => format!(
                    "{scope} dollar budget spent (${spent:.4} of ${limit_usd:.4}); no further model call was made"
                ),
                None => format!(
                    "{scope} dollar budget of ${limit_usd:.4} cannot be counted: the model has no price"
                ),
            }),
            Self::InvalidOutput { reason } => Some(format!(
                "the answer does not match `output_schema:` after one retry: {reason}"
            )),
            Self::EscalationRejected { verdict, by } => Some(format!(
                "the verdict `{verdict}` was below `min_confidence:`, escalated to a person and rejected by {by}"
            )),
        }
    }
}

/// Everything the executor records about one agent step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    /// The agent's final answer (the text of its last message). Asserts on `stdout` check it.
    pub text: String,
    /// The verdict it picked, when verdicts were asked for and it gave a valid one.
    pub verdict: Option<String>,
    /// The reason it gave with the verdict.
    pub verdict_reason: Option<String>,
    /// Every tool call, in the order they were made (the verdict call included).
    pub tool_calls: Vec<RecordedCall>,
    /// Tokens spent by every model call of the step.
    pub usage: Usage,
    /// The model that served, as the endpoint named it (the configured name when it named
    /// none).
    pub model: String,
    /// What the usage cost.
    pub cost: Cost,
    /// Model calls committed.
    pub steps: u32,
    /// How the step ended.
    pub status: AgentStatus,
    /// The confidence given with the verdict, when the step asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// What happened when the verdict was below `min_confidence:`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<EscalationRecord>,
    /// The typed answer (`output_schema:`), once it validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typed_output: Option<serde_json::Value>,
    /// The `fallback:` model that took the conversation over when its source failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_model: Option<String>,
}

/// One escalation of a low-confidence verdict, as recorded with the step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EscalationRecord {
    /// The verdict given.
    pub verdict: String,
    /// Its confidence.
    pub confidence: f64,
    /// The floor it missed.
    pub min_confidence: f64,
    /// The model's note (its reason).
    pub note: String,
    /// Where it went: `human` or `agent:NAME`.
    pub to: String,
    /// What came of it: `approved by X`, `rejected by X`, or the other agent's verdict.
    pub result: String,
}

/// Reads the tool calls out of a committed history: each `ToolUse` block paired with the
/// `ToolResult` that answers it.
pub(crate) fn calls_from_history(history: &[Message]) -> Vec<RecordedCall> {
    let mut results: HashMap<&str, (&str, bool)> = HashMap::new();
    for message in history.iter().filter(|m| m.role == Role::Tool) {
        for block in &message.content {
            if let Block::ToolResult {
                call_id,
                content,
                is_error,
            } = block
            {
                results.insert(call_id.as_str(), (content.as_str(), *is_error));
            }
        }
    }
    history
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(Message::tool_uses)
        .map(
            |treadle_event::ToolUse {
                 id,
                 name,
                 arguments,
             }| {
                let (result, is_error) = results.get(id).copied().unwrap_or(("", true));
                RecordedCall {
                    name: name.to_owned(),
                    arguments: parse_arguments(arguments),
                    result: result.to_owned(),
                    is_error,
                }
            },
        )
        .collect()
}

/// Parses a call's raw argument text; an empty text is an empty object, as endpoints send
/// for tools without parameters.
pub(crate) fn parse_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pairs_calls_with_results_in_order() {
        let history = vec![
            Message::user("go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::ToolUse {
                        id: "a".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"x"}"#.into(),
                    },
                    Block::ToolUse {
                        id: "b".into(),
                        name: "list_dir".into(),
                        arguments: String::new(),
                    },
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![
                    Block::ToolResult {
                        call_id: "b".into(),
                        content: "f.txt".into(),
                        is_error: false,
                    },
                    Block::ToolResult {
                        call_id: "a".into(),
                        content: "no file".into(),
                        is_error: true,
                    },
                ],
            },
        ];
        let calls = calls_from_history(&history);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "read_file");
        assert_eq!(calls[0].arguments, json!({"path": "x"}));
        assert!(calls[0].is_error);
        assert_eq!(calls[1].arguments, json!({}));
        assert_eq!(calls[1].result, "f.txt");
    }

    #[test]
    fn keeps_broken_arguments_as_text() {
        assert_eq!(parse_arguments("{oops"), json!("{oops"));
    }

    #[test]
    fn statuses_explain_themselves() {
        let budget = AgentStatus::BudgetExceeded {
            spent: 120,
            limit: 100,
            scope: "step".into(),
        };
        assert_eq!(
            budget.error().unwrap_or_default(),
            "step token budget spent (120 of 100 tokens); no further model call was made"
        );
        assert!(AgentStatus::Succeeded.error().is_none());
    }
}
