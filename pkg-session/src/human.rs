//! `ask_human`: a tool whose calls a person answers, through a durable gate, with a value
//! checked against a JSON schema.
//!
//! The batch does not run an `ask_human` call: it sees the tool's
//! [`Tool::human_question`] and opens a `human_input` gate (see [`crate::gate`]) whose subject
//! holds the [`HumanQuestion`]. [`Session::respond_gate`](crate::Session::respond_gate) with
//! `GateAnswer::Answer { value }` answers it: a value that does not fit the question's schema
//! (or is not one of its choices) is refused with the reason, nothing is journaled, and the
//! gate stays open for a better answer. The value, as JSON text, is the call's result the
//! model reads. `Deny { reason }` gives the model the refusal; at the deadline the
//! question's default answer is used, or the call fails with "no answer before the deadline".
//!
//! Answers are checked with the `jsonschema` crate: the most used JSON Schema validator in
//! Rust (drafts 4 to 2020-12, well kept), already the session's checker of tool arguments,
//! so one validator and one set of error messages serve both.
//!
//! Because the question is journaled in the gate's subject with the step's staged message,
//! a crash while it waits is resumed like any gate: open again under its id after restore.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::effect::Effect;
use crate::question::HumanQuestion;
use crate::tool::{Tool, ToolError};

/// The built-in `ask_human` tool: the model asks a person a question (with the answer's JSON
/// schema and optional choices) and reads the validated answer as the call's result.
///
/// ```
/// use std::time::Duration;
/// use treadle_session::{AskHuman, Tool};
///
/// let ask = AskHuman::new()
///     .deadline(Duration::from_secs(600))
///     .default_answer(treadle_session::serde_json::json!("no"));
/// assert_eq!(ask.name(), "ask_human");
/// ```
#[derive(Debug, Clone, Default)]
pub struct AskHuman {
    schema: Option<Value>,
    deadline: Option<Duration>,
    default: Option<Value>,
}

impl AskHuman {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fixes the answer's schema: the model's own `schema` argument is then ignored.
    #[must_use]
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// How long a question waits (default: the session's gate deadline).
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The answer taken when nobody answers before the deadline (default: the call fails).
    #[must_use]
    pub fn default_answer(mut self, value: Value) -> Self {
        self.default = Some(value);
        self
    }
}

/// The `ask_human` arguments, as the model writes them.
#[derive(Deserialize)]
struct Asked {
    question: String,
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    choices: Vec<String>,
}

#[async_trait::async_trait]
impl Tool for AskHuman {
    fn name(&self) -> &str {
        "ask_human"
    }

    fn description(&self) -> &str {
        "Asks a person a question and waits for the answer. Use it when you need a decision \
         or a fact only a person has. `schema` is the JSON Schema of the answer you need \
         (default: a string); `choices`, when given, are the only answers allowed."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "question": { "type": "string", "description": "What to ask the person." },
                "schema": { "type": "object", "description": "JSON Schema of the answer." },
                "choices": { "type": "array", "items": { "type": "string" },
                             "description": "The only answers allowed." }
            },
            "required": ["question"]
        })
    }

    async fn call(&self, _arguments: Value) -> Result<String, ToolError> {
        // The batch answers these calls through a gate (`human_question`); reaching here
        // means a runtime that does not know that, and asking nobody must not look answered.
        Err(ToolError::new(
            "ask_human is answered by a person through a gate, and none was opened",
        ))
    }

    fn touches(&self, _arguments: &Value) -> crate::Footprint {
        // A person answers; no file or other call's state is involved.
        crate::Footprint::nothing()
    }

    fn effect(&self) -> Effect {
        // Asking again after a crash is harmless: the journaled answer is reused anyway.
        Effect::Pure
    }

    fn human_question(&self, arguments: &Value) -> Option<(HumanQuestion, Option<Duration>)> {
        let asked: Asked = serde_json::from_value(arguments.clone()).ok()?;
        let schema = match (&self.schema, asked.schema) {
            (Some(fixed), _) => fixed.clone(),
            (None, Some(schema)) => schema,
            (None, None) if !asked.choices.is_empty() => json!({ "enum": asked.choices }),
            (None, None) => json!({ "type": "string" }),
        };
        let question = HumanQuestion {
            question: asked.question,
            schema,
            choices: asked.choices,
            default: self.default.clone(),
        };
        Some((question, self.deadline))
    }
}
