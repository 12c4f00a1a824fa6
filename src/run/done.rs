//! How a step (or a job) ended: [`Status`] and [`Done`], and the outcome of a group
//! of steps. Nothing here depends on the walker, which returns them.

use super::failure::{FailureKind, StepFailure};
use crate::assert::AssertFailure;

/// How a step (or a whole job) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It worked.
    Succeeded,
    /// It failed (exit code 1).
    Failed,
    /// It could not be run (exit code 2).
    Errored,
    /// The run was interrupted (exit code 130).
    Aborted,
}

impl Status {
    /// The status as one lower-case word (`succeeded`, `failed`, `errored`, `aborted`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Errored => "errored",
            Status::Aborted => "aborted",
        }
    }

    /// The process exit code it stands for: 0, 1 (failed), 2 (could not run), 130
    /// (interrupted).
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Succeeded => 0,
            Status::Failed => 1,
            Status::Errored => 2,
            Status::Aborted => 130,
        }
    }
}

/// The result of running one step.
#[derive(Debug, Clone)]
pub struct Done {
    /// How it ended.
    pub status: Status,
    /// Why, when not well: typed where it happened, carried unchanged to the record, the
    /// transcript and the API.
    pub failure: Option<StepFailure>,
    /// Where a verdict sends the plan next.
    pub route: Option<String>,
    /// The asserts that failed, typed (the transcript's JSON lines carry them as they are).
    pub asserts: Vec<AssertFailure>,
    /// The real outcome of the step a `try:` tolerated.
    pub masked: Option<Status>,
}

impl Done {
    pub(crate) fn ok() -> Self {
        Self {
            status: Status::Succeeded,
            failure: None,
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    /// A step that ended with `failure`, with the status it stands for: errored when the
    /// step could not be run ([`FailureKind::is_error`]), else failed.
    pub(crate) fn with(failure: StepFailure) -> Self {
        let status = if failure.kind.is_error() {
            Status::Errored
        } else {
            Status::Failed
        };
        Self {
            status,
            failure: Some(failure),
            ..Self::ok()
        }
    }
    /// A step that ended with a failure of `kind`, saying `message`.
    pub(crate) fn fail(kind: FailureKind, message: impl Into<String>) -> Self {
        Self::with(StepFailure::new(kind, message))
    }
    /// A step that failed in a way no kind names ([`FailureKind::Other`]).
    pub(crate) fn failed(error: impl Into<String>) -> Self {
        Self {
            status: Status::Failed,
            ..Self::with(StepFailure::new(FailureKind::Other, error))
        }
    }
    /// A step that could not be run, in a way no kind names ([`FailureKind::Other`]).
    pub(crate) fn errored(error: impl Into<String>) -> Self {
        Self {
            status: Status::Errored,
            ..Self::with(StepFailure::new(FailureKind::Other, error))
        }
    }
    /// A step the run's interruption (Ctrl-C) stopped.
    pub(crate) fn aborted() -> Self {
        Self {
            status: Status::Aborted,
            ..Self::interrupted()
        }
    }
    /// A step its group stopped (a `fail_fast` sibling failed, a race was won): failed,
    /// as interrupted.
    pub(crate) fn interrupted() -> Self {
        Self::fail(FailureKind::Interrupted, "interrupted")
    }
    /// A step or job whose asserts failed (`what`: `assert` or `job assert`).
    pub(crate) fn asserts_failed(what: &str, failures: Vec<AssertFailure>) -> Self {
        let joined: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Self {
            asserts: failures,
            ..Self::fail(
                FailureKind::AssertsFailed,
                format!("{what} failed: {}", joined.join("; ")),
            )
        }
    }
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Succeeded
    }
    /// The failure's message, when it failed.
    pub fn error(&self) -> Option<&str> {
        self.failure.as_ref().map(|f| f.message.as_str())
    }
    /// The failure's kind, when it failed.
    pub fn kind(&self) -> Option<FailureKind> {
        self.failure.as_ref().map(|f| f.kind)
    }
    /// The same outcome, its message said in other words (a container naming the member
    /// that failed it); its kind stays.
    pub(crate) fn reworded(mut self, say: impl FnOnce(&str) -> String) -> Self {
        let failure = self
            .failure
            .take()
            .unwrap_or_else(|| StepFailure::new(FailureKind::Other, ""));
        self.failure = Some(StepFailure {
            message: say(&failure.message),
            ..failure
        });
        self
    }
}

/// The outcome of a group of steps: the worst status wins (errored over failed).
pub(crate) fn worst(results: &[Done]) -> Done {
    let mut failures = results.iter().filter(|d| !d.is_ok());
    match failures
        .clone()
        .find(|d| d.status == Status::Errored)
        .or_else(|| failures.next())
    {
        Some(d) => Done {
            route: None,
            ..d.clone()
        },
        None => Done::ok(),
    }
}
