//! Load errors: one located message and one repair hint per problem.
//!
//! Every problem the loader or the checks find becomes a [`Diagnostic`], printed as
//! `FILE:LINE:COL: what is wrong` and `hint: how to fix`. The [`Problem`] tag lets tests
//! and `--json` consumers tell the kinds apart without matching text.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::at::Pos;

/// One problem found by a check: where, what kind, what is wrong, how to fix it.
pub type Finding = (Pos, Problem, String, String);

/// What kind of problem a diagnostic reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// The file could not be read.
    Read,
    /// Not valid YAML.
    Syntax,
    /// A key the format does not have.
    UnknownKey,
    /// A value of the wrong type.
    WrongType,
    /// A value of the right type that is not allowed.
    InvalidValue,
    /// A required key is absent.
    MissingKey,
    /// A step is not well formed (no kind, two kinds, a key of another kind).
    BadStep,
    /// A name is defined twice.
    Duplicate,
    /// `--job` names no job, or the file has none.
    UnknownJob,
    /// An input that no earlier step produces.
    UnproducedInput,
    /// `agent:` names no entry of `agents:`.
    UnknownAgent,
    /// A tool name that is not built in.
    UnknownTool,
    /// A verdict routes to a step that does not exist.
    MissingRoute,
    /// A verdict routes backwards to a step without `max_visits`.
    UnboundedLoop,
    /// The model source does not resolve.
    Model,
    /// The API key variable is not set.
    MissingApiKey,
    /// Something this machine lacks (a command, a running server).
    Machine,
}

/// One problem, where it is, and how to fix it.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    /// The pipeline file.
    pub file: PathBuf,
    /// Where in the file, when the problem has a place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Column, with `line`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// The kind of problem.
    pub problem: Problem,
    /// What is wrong, in one sentence.
    pub message: String,
    /// How to fix it.
    pub hint: String,
}

impl Diagnostic {
    /// A diagnostic at `pos` (a position of 0:0 means "no place").
    pub fn new(
        file: &Path,
        pos: Pos,
        problem: Problem,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self {
            file: file.to_path_buf(),
            line: pos.is_known().then_some(pos.line),
            column: pos.is_known().then_some(pos.column),
            problem,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": {}\nhint: {}", self.message, self.hint)
    }
}

/// The problems that stop a pipeline from loading (never empty).
#[derive(Debug, Clone, thiserror::Error)]
pub struct LoadError(pub Vec<Diagnostic>);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names() {
        assert_eq!(
            did_you_mean("ouputs", ["outputs", "inputs"]),
            Some("outputs")
        );
        assert_eq!(did_you_mean("zzz", ["outputs", "inputs"]), None);
    }
}
