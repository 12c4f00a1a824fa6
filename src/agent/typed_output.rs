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

/// The answer as a JSON value that satisfies the schema, or why it is not one.
pub(crate) fn check(text: &str, typed: &TypedOutput) -> Result<Value, String> {
    let value = parse(text)?;
    let validator = jsonschema::validator_for(&typed.schema)
        .map_err(|e| format!("the schema does not compile: {e}"))?;
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
        Err(errors.join("; "))
    }
}

/// Parses the answer: the whole text, else the inside of its last ```json fence, else from
/// its first `{` or `[` to the end.
fn parse(text: &str) -> Result<Value, String> {
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
    Err(format!("the answer is not JSON: {shown:?}"))
}

fn last_fence(text: &str) -> Option<&str> {
    let open = text.rfind("```json").map(|i| i + "```json".len())?;
    let rest = &text[open..];
    let close = rest.find("```")?;
    Some(&rest[..close])
}

/// Writes the value to `OUTPUT/output.json` under `dir`.
pub(crate) fn write(dir: &Path, typed: &TypedOutput, value: &Value) -> Result<(), String> {
    let out = dir.join(&typed.output);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join(OUTPUT_FILE);
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
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
        assert!(err.contains("/score"), "{err}");
        assert!(err.contains("integer"), "{err}");
        let err = check("no json here", &typed()).unwrap_err();
        assert!(err.starts_with("the answer is not JSON"), "{err}");
    }
}
