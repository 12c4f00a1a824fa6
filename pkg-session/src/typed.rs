//! Typed output: [`TurnRequest::ask`] returns a value of the caller's type.
//!
//! The answer's JSON Schema comes from `schemars`. The model is held to it with
//! `response_format: json_schema`, or, for endpoints without it, with a forced reporting
//! tool whose arguments are the answer. The answer is read as a pipeline's
//! `output_schema:` reads it ([`answer_value`]): the whole text, else the inside of its
//! last ```` ```json ```` fence, else from its first `{` or `[`. An answer that does not
//! parse goes back to the model once, with the parse error; a second failure is
//! [`AskError::Parse`].

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::error::RunError;
use crate::inference::{StructuredOutput, ToolSpec};
use crate::protocol::TurnOptions;
use crate::session::{Session, TurnOutcome};
use crate::tool::schema_of;
use crate::turn_request::{ModelChooses, TurnRequest};

/// The name of the reporting tool in [`StructuredOutput::ForcedTool`] mode.
const REPORT_TOOL: &str = "report_answer";

/// Why [`TurnRequest::ask`] returned no value.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the turn did not finish: {0}")]
    Turn(String),
    #[error(
        "the answer does not fit the requested type after one retry: {error}; answer was: {answer}"
    )]
    Parse { error: String, answer: String },
}

impl TurnRequest<'_, ModelChooses> {
    /// Submits the input and reads the turn's answer as a `T`, held to `T`'s JSON Schema
    /// as [`SessionBuilder::structured_output`](crate::SessionBuilder::structured_output)
    /// says. An answer that does not fit goes back to the model once, in a second turn,
    /// with the parse error (the seed, already in the history, is not sent again); a second
    /// misfit is [`AskError::Parse`]. Not offered after
    /// [`choosing`](TurnRequest::choosing): a typed answer may set the first call's tool
    /// choice itself.
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::AskError> {
    /// #[treadle_session::schema]
    /// struct Verdict {
    ///     approve: bool,
    ///     reason: String,
    /// }
    /// let verdict: Verdict = session.turn("Should this change be merged?").ask().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ask<T: JsonSchema + DeserializeOwned>(self) -> Result<T, AskError> {
        let TurnRequest {
            session,
            input,
            options,
            ..
        } = self;
        let mut options = typed_options::<T>(session.structured_output(), options);
        // The seed goes with the first turn only: a retry finds it in the history.
        let seed = std::mem::take(&mut options.seed);
        let first = TurnOptions {
            seed,
            ..options.clone()
        };
        let answer = answer_with(session, input, first).await?;
        let error = match answer_value::<T>(&answer) {
            Ok(value) => return Ok(value),
            Err(error) => error.to_string(),
        };
        let retry = format!(
            "Your answer could not be read: {error}. Answer again with only JSON that matches the schema."
        );
        let answer = answer_with(session, retry, options).await?;
        answer_value::<T>(&answer).map_err(|e| AskError::Parse {
            error: e.to_string(),
            answer,
        })
    }
}

/// `options` with the answer held to `T`'s schema, as `mode` asks: a `response_format`, or
/// a reporting tool the turn forces.
fn typed_options<T: JsonSchema>(mode: StructuredOutput, options: TurnOptions) -> TurnOptions {
    let schema = schema_of::<T>();
    match mode {
        StructuredOutput::JsonSchema => {
            let name = std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or("answer")
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>();
            TurnOptions {
                response_format: Some(serde_json::json!({
                    "type": "json_schema",
                    "json_schema": { "name": name, "schema": schema },
                })),
                ..options
            }
        }
        StructuredOutput::ForcedTool => TurnOptions {
            report_tool: Some(ToolSpec {
                name: REPORT_TOOL.into(),
                description: "Report your final answer. Its arguments are the answer.".into(),
                parameters: schema,
            }),
            ..options
        },
    }
}

/// One turn through the one path (`Session::run_with`), its text or why it has none.
async fn answer_with(
    session: &Session,
    input: String,
    options: TurnOptions,
) -> Result<String, AskError> {
    let report = session.run_with(input, options).await?;
    match report.outcome {
        TurnOutcome::Done { text } => Ok(text),
        TurnOutcome::Failed { error, .. } => Err(AskError::Turn(error)),
        TurnOutcome::Interrupted { reason } => Err(AskError::Turn(reason)),
    }
}

/// The value of an answer, read as a pipeline's `output_schema:` reads one (small models
/// wrap JSON in a fence or put a sentence before it): the whole text, else the inside of
/// its last fence (```` ```json ```` or a bare ```` ``` ````), else from its first `{` or
/// `[`. The error is the whole text's, which is what the model is told on a retry.
fn answer_value<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let trimmed = text.trim();
    let whole = serde_json::from_str(trimmed);
    if whole.is_ok() {
        return whole;
    }
    let fenced = last_fence(trimmed);
    let from_brace = trimmed.find(['{', '[']).map(|start| &trimmed[start..]);
    for candidate in [fenced, from_brace].into_iter().flatten() {
        if let Ok(value) = serde_json::from_str(candidate.trim()) {
            return Ok(value);
        }
    }
    whole
}

/// The inside of the last fenced block of `text` (its info string, such as `json`, cut).
fn last_fence(text: &str) -> Option<&str> {
    let close = text.rfind("```")?;
    let open = text[..close].rfind("```")?;
    let body = &text[open + 3..close];
    // The info string runs to the end of the fence's first line.
    let start = body.find('\n').map_or(0, |i| i + 1);
    Some(&body[start..])
}

#[cfg(test)]
mod tests {
    use super::answer_value;

    #[test]
    fn an_answer_is_read_plain_fenced_or_after_a_sentence() {
        for text in [
            r#"{"a": 1}"#,
            "```json\n{\"a\": 1}\n```",
            "```\n{\"a\": 1}\n```\n",
            "Here it is:\n```json\n{\"a\": 1}\n```",
            "The answer is {\"a\": 1}",
        ] {
            let value: serde_json::Value = answer_value(text).expect(text);
            assert_eq!(value["a"], 1, "{text}");
        }
        assert!(answer_value::<serde_json::Value>("no JSON here").is_err());
    }
}
