//! Reading a pipeline file: YAML through serde-saphyr into [`Pipeline`], with every parse
//! error turned into a located [`Diagnostic`] that says how to fix it.

use std::path::Path;

use serde_saphyr::Error as YamlError;

use super::at::Pos;
use super::diagnostic::{Diagnostic, LoadError, Problem, did_you_mean};
use super::format::{Pipeline, RawStep};

/// The largest pipeline file read by default (bytes); `TREADLE_MAX_PIPELINE_BYTES` changes it.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The environment variable that sets the pipeline file size limit.
pub const MAX_FILE_VAR: &str = "TREADLE_MAX_PIPELINE_BYTES";

/// The pipeline file size limit in force.
pub fn max_file_bytes() -> u64 {
    std::env::var(MAX_FILE_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_FILE_BYTES)
}

/// Reads and parses `path`. Semantic checks are [`super::check`]'s job.
pub fn read(path: &Path) -> Result<Pipeline<RawStep>, LoadError> {
    parse(path, &read_source(path)?)
}

/// Reads the text of `path`, refusing what is not a reasonably sized UTF-8 file.
pub fn read_source(path: &Path) -> Result<String, LoadError> {
    let refuse = |message: String, hint: &str| {
        LoadError(vec![Diagnostic::new(
            path,
            Pos::default(),
            Problem::Read,
            message,
            hint,
        )])
    };
    let text = read_text(path, max_file_bytes()).map_err(|e| match e {
        TextError::Io(e) => {
            let hint = if e.kind() == std::io::ErrorKind::NotFound {
                "run treadle in the directory of your treadle.yml, or pass the file: \
                 `treadle run path/to/pipeline.yml`"
            } else {
                "check the file's permissions and that it is UTF-8 text"
            };
            refuse(format!("cannot read the pipeline file: {e}"), hint)
        }
        TextError::NotAFile => refuse(
            "the pipeline file is not a regular file (a device, a pipe or a directory)".to_owned(),
            "pass the path of a YAML file",
        ),
        TextError::TooLarge(limit) => refuse(
            format!(
                "the pipeline file is larger than the pipeline file size limit ({limit} bytes)"
            ),
            "split it, or raise the limit with TREADLE_MAX_PIPELINE_BYTES=BYTES",
        ),
        TextError::NotUtf8 => refuse(
            "the pipeline file is not UTF-8 text".to_owned(),
            "save it as UTF-8",
        ),
    })?;
    Ok(text)
}

/// Why a pipeline file's text cannot be had.
#[derive(Debug, thiserror::Error)]
enum TextError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    #[error("not UTF-8")]
    NotUtf8,
}

/// Reads at most `limit` bytes of a regular file: `/dev/zero`, a FIFO or a file that grows
/// while read cannot make treadle read without end.
fn read_text(path: &Path, limit: u64) -> Result<String, TextError> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(TextError::NotAFile);
    }
    if meta.len() > limit {
        return Err(TextError::TooLarge(limit));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(TextError::TooLarge(limit));
    }
    String::from_utf8(bytes).map_err(|_| TextError::NotUtf8)
}

/// Parses pipeline text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Pipeline<RawStep>, LoadError> {
    if text.trim().is_empty() {
        return Err(LoadError(vec![Diagnostic::new(
            path,
            Pos { line: 1, column: 1 },
            Problem::MissingKey,
            "the pipeline file is empty",
            "start with `jobs:` and a job with a `plan:` (see `treadle docs pipelines`)",
        )]));
    }
    serde_saphyr::from_str::<Pipeline<RawStep>>(text)
        .map_err(|e| LoadError(vec![diagnose(path, text, &e)]))
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
pub(super) fn diagnose(path: &Path, text: &str, err: &YamlError) -> Diagnostic {
    let pos = pos_of(err);
    let d =
        |problem, message: String, hint: String| Diagnostic::new(path, pos, problem, message, hint);
    let through_alias = matches!(err.without_snippet(), YamlError::AliasError { .. });
    match original(err) {
        YamlError::Budget { breach, .. } if through_alias => d(
            Problem::InvalidValue,
            format!(
                "the pipeline is too large to load: its aliases (`*name`) expand to {}",
                breach_words(breach)
            ),
            "each alias copies its anchor's whole value, so aliases of lists of aliases \
             grow exponentially (a \"billion laughs\"); write the values out, or use fewer \
             levels of aliases"
                .to_owned(),
        ),
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => d(
            Problem::UnknownKey,
            format!("unknown key `{field}`"),
            keys_hint(field, expected),
        ),
        YamlError::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => d(
            Problem::WrongType,
            format!(
                "wrong type{}: found {unexpected}, expected {expected}",
                of_key(text, pos)
            ),
            format!("write {expected} here"),
        ),
        YamlError::Unexpected { expected, .. } if *expected == "sequence start" => d(
            Problem::WrongType,
            format!("wrong type{}: expected a list", of_key(text, pos)),
            "write a list here, e.g. `[dist]`, or one `- item` per line below the key".to_owned(),
        ),
        YamlError::Unexpected { expected, .. } if *expected == "mapping start" => d(
            Problem::WrongType,
            format!("wrong type{}: expected a mapping", of_key(text, pos)),
            "write `key: value` pairs here, indented below the key or as `{ key: value }`"
                .to_owned(),
        ),
        YamlError::Budget { breach, .. } => d(
            Problem::InvalidValue,
            format!(
                "the pipeline is too large to load: {}",
                breach_words(breach)
            ),
            "split the pipeline into several files or simplify it".to_owned(),
        ),
        YamlError::InvalidScalar { ty, .. } => {
            let expected = scalar_words(ty);
            d(
                Problem::WrongType,
                format!("wrong type{}: expected {expected}", of_key(text, pos)),
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
            match of_key(text, pos) {
                key if key.is_empty() => msg.clone(),
                key => format!("invalid value{key}: {msg}"),
            },
            "fix the value at this position (`treadle docs pipelines` describes the format)"
                .to_owned(),
        ),
        YamlError::DuplicateMappingKey { key, .. } => d(
            Problem::Duplicate,
            match key {
                Some(k) => format!("key `{k}` appears twice in this mapping"),
                None => "a key appears twice in this mapping".to_owned(),
            },
            "each key may appear once per mapping; remove or merge the repeated one".to_owned(),
        ),
        _ if first_line(err) == "recursion limit exceeded" => d(
            Problem::InvalidValue,
            "the pipeline is too large to load: lists and mappings nested too deeply".to_owned(),
            "split the pipeline into several files or simplify it".to_owned(),
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

/// The hint for an unknown key: the likely one it misspells, and every key allowed.
fn keys_hint(field: &str, expected: &[&str]) -> String {
    match did_you_mean(field, expected.iter().copied()) {
        Some(near) => format!(
            "did you mean `{near}`? keys allowed here: {}",
            expected.join(", ")
        ),
        None => format!("keys allowed here: {}", expected.join(", ")),
    }
}

/// A Rust scalar type's name as a reader of the file says it.
fn scalar_words(ty: &str) -> &str {
    match ty {
        t if t.starts_with('u') || t.starts_with('i') => "a whole number",
        t if t.starts_with('f') => "a number",
        "bool" => "true or false",
        t => t,
    }
}

/// ` for `KEY`` when the text at `pos` is the value of a `KEY:` (block or flow style).
fn of_key(text: &str, pos: Pos) -> String {
    let line = text
        .lines()
        .nth(pos.line.saturating_sub(1) as usize)
        .unwrap_or("");
    let before: String = line
        .chars()
        .take(pos.column.saturating_sub(1) as usize)
        .collect();
    let Some(colon) = before.trim_end().strip_suffix(':') else {
        return String::new();
    };
    let key: String = colon
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if key.is_empty() {
        String::new()
    } else {
        format!(" for `{key}`")
    }
}

/// The error under the parser's wrappers (a snippet of the source, the alias that was
/// being expanded): what went wrong, not where it was reached from.
fn original(err: &YamlError) -> &YamlError {
    let mut err = err;
    while let YamlError::AliasError { error, .. } | YamlError::WithSnippet { error, .. } = err {
        err = error;
    }
    err
}

/// A YAML size budget breach in words (not the parser's debug text).
fn breach_words(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    match breach {
        B::Nodes { .. } | B::Events { .. } => "too many YAML values".to_owned(),
        B::Depth { .. } => "lists and mappings nested too deeply".to_owned(),
        B::Aliases { .. } | B::Anchors { .. } | B::AliasAnchorRatio { .. } => {
            "too many anchors or aliases (`&name`, `*name`)".to_owned()
        }
        B::ScalarBytes { .. } | B::CommentBytes { .. } | B::InputBytes { .. } => {
            "too much text".to_owned()
        }
        B::Documents { .. } => "too many YAML documents (`---`)".to_owned(),
        _ => "a YAML size limit was reached".to_owned(),
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
