//! A question for a person: what is asked, the JSON Schema its answer must fit, and the
//! check of an answer. Below `tool` (whose `human_question` names it) and `human`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A question a person answers with a value that fits `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HumanQuestion {
    /// What the person is asked.
    pub question: String,
    /// The JSON Schema the answer must fit.
    pub schema: Value,
    /// When not empty, the answer must be one of these strings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// The answer taken when nobody answers before the deadline; without one, the call
    /// fails then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

impl HumanQuestion {
    /// A question whose answer is any string.
    pub fn new(question: impl Into<String>) -> Self {
        HumanQuestion {
            question: question.into(),
            schema: json!({ "type": "string" }),
            choices: Vec::new(),
            default: None,
        }
    }

    /// Checks a person's answer: it fits the schema and, with choices, is one of them. The
    /// error lists what is wrong (at most a few problems), for the person to fix.
    pub fn check(&self, value: &Value) -> Result<(), AnswerError> {
        const SHOWN: usize = 3;
        let validator = jsonschema::validator_for(&self.schema)
            .map_err(|e| AnswerError::Schema(e.to_string()))?;
        let problems = crate::validators::problems(&validator, value, SHOWN);
        if !problems.is_empty() {
            return Err(AnswerError::DoesNotFit {
                schema: self.schema.clone(),
                problems,
            });
        }
        if !self.choices.is_empty() && !self.choices.iter().any(|c| value.as_str() == Some(c)) {
            return Err(AnswerError::NotAChoice(self.choices.clone()));
        }
        Ok(())
    }

    /// Whether the schema compiles, checked before a gate asks the question.
    pub fn compiles(&self) -> Result<(), AnswerError> {
        jsonschema::validator_for(&self.schema)
            .map(|_| ())
            .map_err(|e| AnswerError::Schema(e.to_string()))
    }
}

/// Why an answer does not answer a [`HumanQuestion`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// The question's schema does not compile (nothing can answer it).
    #[error("the question's answer schema does not compile: {0}")]
    Schema(String),
    /// The answer does not fit the schema: the first few problems.
    #[error("the answer does not fit the question's schema {schema}: {}", .problems.join("; "))]
    DoesNotFit {
        /// The schema.
        schema: Value,
        /// What is wrong.
        problems: Vec<String>,
    },
    /// The question has choices and the answer is none of them.
    #[error("the answer must be one of the choices: {}", .0.join(", "))]
    NotAChoice(Vec<String>),
}
