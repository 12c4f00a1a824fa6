//! Deterministic checks of what a step and a job did: the `assert:` blocks of a pipeline.
//!
//! The checks are pure functions over recorded facts, so `treadle test` and `treadle run`
//! judge a step the same way, and a replayed step can be judged again from its record.
//! Every failed check is one [`AssertFailure`] whose message says what was expected and
//! what was found; all failures are reported, not only the first.
//!
//! Step asserts:
//! * `files`: each path (relative to the step directory, usually under an output such as
//!   `report/summary.md`) exists and is non-empty; a directory must hold at least one entry.
//!   Paths are confined like the agent's tools: a path that leaves the step directory fails.
//! * `stdout`: the step's output (a task's stdout, an agent's final answer) contains the text.
//!   When the text is missing there but the task wrote it to stderr, the failure says so.
//! * `output`: the text is in either stream (a task's stdout or stderr; an agent's answer).
//! * `code`: a task's exit code.
//! * `verdict`: the verdict an agent picked.
//! * `tool_calls`: the calls appear in this order, other calls may come between, and each
//!   expected `args` object is a subset of the call's arguments (see [`json_subset`]). An
//!   entry with `ok: true` matches only a call that ran and succeeded (not refused, not an
//!   error); when the only matching calls failed, the failure names the call and its error.
//!
//! Job asserts: `execution` (the names of the steps that ran, in order, exactly) and
//! `outcome` (`success` or `failure`).

use std::path::Path;

use crate::agent::RecordedCall;
use crate::pipeline::{JobAssert, StepAssert, ToolCallAssert};
use crate::tools::Workspace;

/// What a step did, as far as its asserts can see.
#[derive(Debug, Clone, Copy)]
pub struct StepFacts<'a> {
    /// The step directory; `files` are resolved against it.
    pub dir: &'a Path,
    /// A task's standard output, or an agent's final answer.
    pub stdout: &'a str,
    /// A task's standard error (empty for other steps).
    pub stderr: &'a str,
    /// A task's exit code (`None` for an agent step, or a task that was killed).
    pub code: Option<i32>,
    /// An agent's verdict.
    pub verdict: Option<&'a str>,
    /// An agent's tool calls, in order.
    pub tool_calls: &'a [RecordedCall],
}

/// How a job ended, for `assert: { outcome }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Every step that had to succeed succeeded.
    Success,
    /// A step failed.
    Failure,
}

impl JobOutcome {
    fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }

    /// Reads an outcome as written: `success`/`succeeded` or `failure`/`failed`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "success" | "succeeded" => Some(Self::Success),
            "failure" | "failed" => Some(Self::Failure),
            _ => None,
        }
    }
}

/// What a job did, as far as its asserts can see.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts<'a> {
    /// The names of the job's top-level steps that ran, in the order they ran.
    pub executed: &'a [String],
    /// How the job ended.
    pub outcome: JobOutcome,
}

/// One failed check. In the transcript's JSON lines it is an object whose `check` names
/// the failed check, with the fields below.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum AssertFailure {
    /// A `files` entry does not exist.
    #[error("assert files: {path} was not written (it does not exist)")]
    FileMissing {
        /// The path as the pipeline wrote it.
        path: String,
    },
    /// A `files` entry exists but is empty.
    #[error("assert files: {path} is empty")]
    FileEmpty {
        /// The path as the pipeline wrote it.
        path: String,
    },
    /// A `files` entry points outside the step directory.
    #[error("assert files: {path} is not inside the step directory: {reason}")]
    FileOutside {
        /// The path as the pipeline wrote it.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// The output does not contain the expected text.
    #[error("assert stdout: the output does not contain {expected:?}; it ends with: {tail:?}")]
    Stdout {
        /// The text expected.
        expected: String,
        /// The end of the actual output.
        tail: String,
    },
    /// The text is not in stdout, but the step wrote it to stderr.
    #[error(
        "assert stdout: the output does not contain {expected:?}, but stderr does (the command wrote it there); \
         redirect it with `2>&1`, or assert `output: {expected:?}`, which reads both streams"
    )]
    StdoutInStderr {
        /// The text expected.
        expected: String,
    },
    /// Neither stream contains the expected text.
    #[error(
        "assert output: neither stdout nor stderr contains {expected:?}; the output ends with: {tail:?}"
    )]
    Output {
        /// The text expected.
        expected: String,
        /// The end of the actual output (both streams).
        tail: String,
    },
    /// The exit code differs.
    #[error("assert code: expected exit code {expected}, got {}", display_code(*.actual))]
    Code {
        /// The code expected.
        expected: i32,
        /// The code the step ended with.
        actual: Option<i32>,
    },
    /// The verdict differs.
    #[error("assert verdict: expected {expected:?}, got {}", actual.as_deref().map_or("no verdict".to_owned(), |v| format!("{v:?}")))]
    Verdict {
        /// The verdict expected.
        expected: String,
        /// The verdict given.
        actual: Option<String>,
    },
    /// An expected tool call was not found after the ones matched before it.
    #[error(
        "assert tool_calls: expected call #{position} {expected} was not made{after}; calls made: {made}"
    )]
    ToolCall {
        /// 1-based position in the expected list.
        position: usize,
        /// The expected call, as `name {args}`.
        expected: String,
        /// Where the search started: empty, or ` after call #N` of the calls made.
        after: String,
        /// The calls made, as `name {args}`, in order.
        made: String,
    },
    /// An expected call (`ok: true`) was made, but it failed or was refused.
    #[error(
        "assert tool_calls: expected call #{position} {expected} to succeed, but {call} failed: {reason}"
    )]
    ToolCallFailed {
        /// 1-based position in the expected list.
        position: usize,
        /// The expected call, as `name {args}`.
        expected: String,
        /// The failed call, as `name {args}`.
        call: String,
        /// What the call answered (its error, cut to a line).
        reason: String,
    },
    /// The steps that ran differ.
    #[error("assert execution: expected the steps [{}] to run, but [{}] ran", expected.join(", "), actual.join(", "))]
    Execution {
        /// The expected order.
        expected: Vec<String>,
        /// The order that ran.
        actual: Vec<String>,
    },
    /// The job's outcome differs.
    #[error("assert outcome: expected {expected}, the job ended in {actual}")]
    Outcome {
        /// The outcome expected, as written.
        expected: String,
        /// The outcome.
        actual: &'static str,
    },
    /// `outcome:` names no outcome.
    #[error("assert outcome: {value:?} is not an outcome; use success or failure")]
    BadOutcome {
        /// The value as written.
        value: String,
    },
}

fn display_code(code: Option<i32>) -> String {
    code.map_or_else(
        || "none (the step has no exit code)".to_owned(),
        |c| c.to_string(),
    )
}

/// Checks a step's asserts. An empty result means every check passed.
pub fn check_step(spec: &StepAssert, facts: &StepFacts<'_>) -> Vec<AssertFailure> {
    let mut failures = Vec::new();
    failures.extend(check_files(&spec.files, facts.dir));
    if let Some(expected) = &spec.stdout
        && !facts.stdout.contains(expected.as_str())
    {
        failures.push(if facts.stderr.contains(expected.as_str()) {
            AssertFailure::StdoutInStderr {
                expected: expected.clone(),
            }
        } else {
            AssertFailure::Stdout {
                expected: expected.clone(),
                tail: tail(facts.stdout, 200),
            }
        });
    }
    if let Some(expected) = &spec.output
        && !facts.stdout.contains(expected.as_str())
        && !facts.stderr.contains(expected.as_str())
    {
        let both = format!("{}{}", facts.stdout, facts.stderr);
        failures.push(AssertFailure::Output {
            expected: expected.clone(),
            tail: tail(&both, 200),
        });
    }
    if let Some(expected) = spec.code
        && facts.code != Some(expected)
    {
        failures.push(AssertFailure::Code {
            expected,
            actual: facts.code,
        });
    }
    if let Some(expected) = &spec.verdict
        && facts.verdict != Some(expected.as_str())
    {
        failures.push(AssertFailure::Verdict {
            expected: expected.clone(),
            actual: facts.verdict.map(str::to_owned),
        });
    }
    failures.extend(check_tool_calls(&spec.tool_calls, facts.tool_calls));
    failures
}

/// Checks a job's asserts. An empty result means every check passed.
pub fn check_job(spec: &JobAssert, facts: &JobFacts<'_>) -> Vec<AssertFailure> {
    let mut failures = Vec::new();
    if let Some(expected) = &spec.execution
        && expected.as_slice() != facts.executed
    {
        failures.push(AssertFailure::Execution {
            expected: expected.clone(),
            actual: facts.executed.to_vec(),
        });
    }
    if let Some(expected) = &spec.outcome {
        match JobOutcome::parse(expected) {
            None => failures.push(AssertFailure::BadOutcome {
                value: expected.clone(),
            }),
            Some(outcome) if outcome != facts.outcome => failures.push(AssertFailure::Outcome {
                expected: expected.clone(),
                actual: facts.outcome.name(),
            }),
            Some(_) => {}
        }
    }
    failures
}

fn check_files(files: &[String], dir: &Path) -> Vec<AssertFailure> {
    if files.is_empty() {
        return Vec::new();
    }
    let workspace = match Workspace::new(dir) {
        Ok(ws) => ws,
        // No step directory: nothing was written.
        Err(_) => {
            return files
                .iter()
                .map(|path| AssertFailure::FileMissing { path: path.clone() })
                .collect();
        }
    };
    files
        .iter()
        .filter_map(|path| {
            let resolved = match workspace.resolve(path) {
                Ok(resolved) => resolved,
                Err(error) => {
                    return Some(AssertFailure::FileOutside {
                        path: path.clone(),
                        reason: error.to_string(),
                    });
                }
            };
            let missing = || AssertFailure::FileMissing { path: path.clone() };
            let empty = || AssertFailure::FileEmpty { path: path.clone() };
            match std::fs::metadata(&resolved) {
                Err(_) => Some(missing()),
                Ok(meta) if meta.is_dir() => {
                    let has_entries = std::fs::read_dir(&resolved)
                        .is_ok_and(|mut entries| entries.next().is_some());
                    (!has_entries).then(empty)
                }
                Ok(meta) if meta.len() == 0 => Some(empty()),
                Ok(_) => None,
            }
        })
        .collect()
}

fn check_tool_calls(expected: &[ToolCallAssert], made: &[RecordedCall]) -> Vec<AssertFailure> {
    // Greedy matching finds an ordered subsequence whenever one exists: taking the earliest
    // match for each expectation leaves the most calls for the ones after it.
    let mut next = 0;
    for (i, want) in expected.iter().enumerate() {
        let fits = |call: &RecordedCall| {
            call.name == want.name
                && want
                    .args
                    .as_ref()
                    .is_none_or(|args| json_subset(args, &call.arguments))
        };
        let succeeded = |call: &RecordedCall| want.ok != Some(true) || !call.is_error;
        match made[next..].iter().position(|c| fits(c) && succeeded(c)) {
            Some(offset) => next += offset + 1,
            None => return vec![missed(i + 1, want, next, made, fits)],
        }
    }
    Vec::new()
}

/// Why expectation `position` found no call after call #`next`: a fitting call that failed
/// (named with its error), or no fitting call at all.
fn missed(
    position: usize,
    want: &ToolCallAssert,
    next: usize,
    made: &[RecordedCall],
    fits: impl Fn(&RecordedCall) -> bool,
) -> AssertFailure {
    let expected = describe_call(&want.name, want.args.as_ref());
    if let Some(failed) = made[next..].iter().find(|c| fits(c)) {
        let reason = failed.result.lines().next().unwrap_or_default();
        return AssertFailure::ToolCallFailed {
            position,
            expected,
            call: describe_call(&failed.name, Some(&failed.arguments)),
            reason: crate::tools::truncate(reason.to_owned(), 300, "cut"),
        };
    }
    AssertFailure::ToolCall {
        position,
        expected,
        after: if next == 0 {
            String::new()
        } else {
            format!(" after call #{next}")
        },
        made: if made.is_empty() {
            "none".to_owned()
        } else {
            made.iter()
                .map(|c| describe_call(&c.name, Some(&c.arguments)))
                .collect::<Vec<_>>()
                .join(", ")
        },
    }
}

fn describe_call(name: &str, args: Option<&serde_json::Value>) -> String {
    match args {
        Some(args) => format!("{name} {args}"),
        None => name.to_owned(),
    }
}

/// Whether `expected` is a subset of `actual`: every key of an expected object is present
/// in the actual object with a matching value (recursively); arrays match element by
/// element and must have the same length; other values must be equal.
pub fn json_subset(expected: &serde_json::Value, actual: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, value)| have.get(key).is_some_and(|got| json_subset(value, got))),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| json_subset(w, h))
        }
        _ => expected == actual,
    }
}

/// The last `max` bytes of `text`, on a character boundary.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests;
