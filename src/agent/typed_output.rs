//! `output_schema:`: the agent's final answer read as JSON and checked against a JSON Schema.
//!
//! The schema is put in the prompt, the answer is parsed (a ```json fence around it is
//! accepted, models add one), validated, and on failure sent back once with the reason; a
//! second failure fails the step with that reason. A valid answer is written, pretty-printed,
//! to `OUTPUT/output.json` in the step directory, where the step's `outputs:` collect it.
//!
//! Text, not `response_format`: many OpenAI-compatible servers ignore or refuse
//! `response_format`, and an answer in text with one retry works on all of them.

use std::path::Path;

use serde_json::Value;

use super::controls::TypedOutput;
use crate::pipeline::controls::OUTPUT_FILE;

/// The prompt with the schema the answer must fit.
pub(crate) fn prompt(prompt: &str, typed: &TypedOutput) -> String {
    format!(
        "{prompt}\n\nEnd with your answer as a single JSON value, and nothing after it, that \
         matches this JSON Schema:\n{}",
        typed.schema
    )
}

/// The message that asks again, with why the answer did not fit.
pub(crate) fn retry(reason: &str) -> String {
    format!(
        "Your answer does not match the required JSON Schema: {reason}. Answer again with only \
         the corrected JSON value."
    )
}

/// Why an answer is not the typed output (`output_schema:`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputError {
    /// No JSON in it (the start of the answer).
    #[error("the answer is not JSON: {0:?}")]
    NotJson(String),
    /// The schema does not compile.
    #[error("the schema does not compile: {0}")]
    Schema(String),
    /// It does not fit the schema: each problem, with where.
    #[error("{}", .0.join("; "))]
    DoesNotFit(Vec<String>),
    /// The valid answer could not be written to its output.
    #[error("cannot write {}: {reason}", .path.display())]
    Write {
        /// The file or directory.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
}

/// The answer as a JSON value that satisfies the schema, or why it is not one.
pub(crate) fn check(text: &str, typed: &TypedOutput) -> Result<Value, OutputError> {
    let value = parse(text)?;
    let validator =
        jsonschema::validator_for(&typed.schema).map_err(|e| OutputError::Schema(e.to_string()))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(OutputError::DoesNotFit(errors))
    }
}

/// Parses the answer: the whole text, else the inside of its last ```json fence, else from
/// its first `{` or `[` to the end.
fn parse(text: &str) -> Result<Value, OutputError> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Ok(value);
    }
    if let Some(fenced) = last_fence(trimmed)
        && let Ok(value) = serde_json::from_str(fenced.trim())
    {
        return Ok(value);
    }
    if let Some(start) = trimmed.find(['{', '['])
        && let Ok(value) = serde_json::from_str(&trimmed[start..])
    {
        return Ok(value);
    }
    let shown: String = trimmed.chars().take(200).collect();
    Err(OutputError::NotJson(shown))
}

fn last_fence(text: &str) -> Option<&str> {
    let open = text.rfind("```json").map(|i| i + "```json".len())?;
    let rest = &text[open..];
    let close = rest.find("```")?;
    Some(&rest[..close])
}

/// Writes the value to `OUTPUT/output.json` under `dir`.
pub(crate) fn write(dir: &Path, typed: &TypedOutput, value: &Value) -> Result<(), OutputError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| OutputError::Write {
            path,
            reason: e.to_string(),
        }
    };
    let out = dir.join(&typed.output);
    std::fs::create_dir_all(&out).map_err(failed(&out))?;
    let path = out.join(OUTPUT_FILE);
    // A JSON value always writes back as JSON.
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    std::fs::write(&path, text + "\n").map_err(failed(&path))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn typed() -> TypedOutput {
        TypedOutput {
            schema: json!({
                "type": "object",
                "properties": { "title": { "type": "string" }, "score": { "type": "integer" } },
                "required": ["title", "score"]
            }),
            output: "review".into(),
        }
    }

    #[test]
    fn accepts_plain_and_fenced_json() {
        assert_eq!(
            check(r#"{"title": "t", "score": 3}"#, &typed()).unwrap()["score"],
            3
        );
        let fenced = "Here it is:\n```json\n{\"title\": \"t\", \"score\": 1}\n```\n";
        assert_eq!(check(fenced, &typed()).unwrap()["title"], "t");
    }

    #[test]
    fn says_why_an_answer_does_not_fit() {
        let err = check(r#"{"title": "t", "score": "high"}"#, &typed()).unwrap_err();
        assert!(matches!(err, OutputError::DoesNotFit(_)), "{err}");
        let err = err.to_string();
        assert!(err.contains("/score"), "{err}");
        assert!(err.contains("integer"), "{err}");
        let err = check("no json here", &typed()).unwrap_err();
        assert!(matches!(err, OutputError::NotJson(_)), "{err}");
    }
}
