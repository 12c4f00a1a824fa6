//! How a step (or a job) ended: [`Status`] and [`Done`], and the outcome of a group
//! of steps. Nothing here depends on the walker, which returns them.

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
}

/// The result of running one step.
#[derive(Debug, Clone)]
pub struct Done {
    /// How it ended.
    pub status: Status,
    /// Why, when not well.
    pub error: Option<String>,
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
            error: None,
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn failed(error: impl Into<String>) -> Self {
        Self {
            status: Status::Failed,
            error: Some(error.into()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn errored(error: impl Into<String>) -> Self {
        Self {
            status: Status::Errored,
            error: Some(error.into()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn aborted() -> Self {
        Self {
            status: Status::Aborted,
            error: Some("interrupted".to_owned()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    /// A step or job whose asserts failed (`what`: `assert` or `job assert`).
    pub(crate) fn asserts_failed(what: &str, failures: Vec<AssertFailure>) -> Self {
        let joined: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Self {
            asserts: failures,
            ..Self::failed(format!("{what} failed: {}", joined.join("; ")))
        }
    }
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Succeeded
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
