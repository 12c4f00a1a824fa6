//! Reading a pipeline file: YAML through serde-saphyr into [`Pipeline`], with every parse
//! error turned into a located [`Diagnostic`] that says how to fix it.

use std::path::Path;

use serde_saphyr::Error as YamlError;

use super::at::Pos;
use super::diagnostic::{Diagnostic, LoadError, Problem, did_you_mean};
use super::format::Pipeline;

/// Reads and parses `path`. Semantic checks are [`super::check`]'s job.
pub fn read(path: &Path) -> Result<Pipeline, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            "run treadle in the directory of your treadle.yml, or pass the file: \
             `treadle run path/to/pipeline.yml`"
        } else {
            "check the file's permissions and that it is UTF-8 text"
        };
        LoadError(vec![Diagnostic::new(
            path,
            Pos::default(),
            Problem::Read,
            format!("cannot read the pipeline file: {e}"),
            hint,
        )])
    })?;
    parse(path, &text)
}

/// Parses pipeline text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Pipeline, LoadError> {
    if text.trim().is_empty() {
        return Err(LoadError(vec![Diagnostic::new(
            path,
            Pos { line: 1, column: 1 },
            Problem::MissingKey,
            "the pipeline file is empty",
            "start with `jobs:` and a job with a `plan:` (see docs/pipelines.md)",
        )]));
    }
    serde_saphyr::from_str::<Pipeline>(text).map_err(|e| LoadError(vec![diagnose(path, text, &e)]))
}

fn pos_of(e: &YamlError) -> Pos {
    e.location()
        .map(|l| Pos {
            line: u32::try_from(l.line()).unwrap_or(0),
            column: u32::try_from(l.column()).unwrap_or(0),
        })
        .unwrap_or_default()
}

/// Turns a serde-saphyr error into our message and hint.
fn diagnose(path: &Path, text: &str, err: &YamlError) -> Diagnostic {
    let pos = pos_of(err);
    let d =
        |problem, message: String, hint: String| Diagnostic::new(path, pos, problem, message, hint);
    match err.without_snippet() {
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => {
            let hint = match did_you_mean(field, expected.iter().copied()) {
                Some(near) => format!(
                    "did you mean `{near}`? keys allowed here: {}",
                    expected.join(", ")
                ),
                None => format!("keys allowed here: {}", expected.join(", ")),
            };
            d(Problem::UnknownKey, format!("unknown key `{field}`"), hint)
        }
        YamlError::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => d(
            Problem::WrongType,
            format!("wrong type: found {unexpected}, expected {expected}"),
            format!("write {expected} here"),
        ),
        YamlError::InvalidScalar { ty, .. } => {
            let expected = match *ty {
                t if t.starts_with('u') || t.starts_with('i') => "a whole number",
                t if t.starts_with('f') => "a number",
                "bool" => "true or false",
                t => t,
            };
            d(
                Problem::WrongType,
                format!("wrong type: expected {expected}"),
                format!("write {expected} here"),
            )
        }
        YamlError::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => d(
            Problem::InvalidValue,
            format!("invalid value {unexpected}, expected {expected}"),
            format!("write {expected} here"),
        ),
        YamlError::SerdeMissingField { field, .. } => d(
            Problem::MissingKey,
            format!("missing key `{field}`"),
            format!("add `{field}:` to this mapping"),
        ),
        YamlError::Message { msg, .. } => d(
            Problem::InvalidValue,
            msg.clone(),
            "fix the value at this position (see docs/pipelines.md for the format)".to_owned(),
        ),
        YamlError::DuplicateMappingKey { .. } => d(
            Problem::Syntax,
            first_line(err),
            "each key may appear once per mapping; remove or merge the repeated one".to_owned(),
        ),
        _ => {
            let message = first_line(err);
            let hint = syntax_hint(text, pos);
            d(
                Problem::Syntax,
                format!("YAML syntax error: {message}"),
                hint,
            )
        }
    }
}

/// The error's own text without the snippet and without a trailing location we print
/// ourselves.
fn first_line(err: &YamlError) -> String {
    let text = err.without_snippet().to_string();
    let line = text.lines().next().unwrap_or("").trim();
    line.split(" at line ").next().unwrap_or(line).to_owned()
}

fn syntax_hint(text: &str, pos: Pos) -> String {
    // The scanner often reports a tab at the end of the line before the one holding it.
    let at = pos.line.saturating_sub(1) as usize;
    let line = text.lines().nth(at).unwrap_or("");
    let next = text.lines().nth(at + 1).unwrap_or("");
    if line.contains('\t') || next.starts_with('\t') {
        "YAML does not allow tabs for indentation; indent with spaces".to_owned()
    } else if line.trim_start().starts_with("- ")
        && line.contains(": ")
        && line.matches(": ").count() > 1
    {
        "quote a value that contains `: ` (for example run: \"echo a: b\")".to_owned()
    } else {
        "check the indentation and quoting on this line and the one before it; \
         a value containing `: `, `#` or starting with `*`, `&`, `{` or `[` needs quotes"
            .to_owned()
    }
}
