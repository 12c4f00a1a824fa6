//! What a workflow's shell and agent steps give back, as their records keep them (a
//! replayed step gives back what it gave when it ran): [`ShellOutput`] and
//! [`AgentReply`], each handing out its step's declared output artifacts by name
//! ([`Artifact`]). The calls that run the steps are `outputs.rs`.

use super::artifact::{Artifact, ArtifactError, Made};
use crate::run::state::StepRecord;

/// What a shell step gave back, as its record in the state file keeps it (a replayed
/// step gives back what it gave when it ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutput {
    /// Its exit code (`None`: a signal or its timeout ended it).
    pub exit_code: Option<i32>,
    /// Its stdout: the last 64 KiB ([`crate::run::task::STREAM_END_BYTES`]), secrets
    /// masked. A longer result belongs in an output artifact.
    pub stdout: String,
    /// Its stderr, the same way.
    pub stderr: String,
    /// Whether stdout or stderr was longer than that, so only its end is here.
    pub truncated: bool,
    made: Made,
}

impl ShellOutput {
    /// Whether the command exited 0. A step that did not is an
    /// `Err(FlowError::Step { .. })`, whose `FlowError::output` is this.
    pub fn is_success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// Output artifact `name` of the step (one of its `outputs`), or
    /// [`ArtifactError::NotDeclared`].
    pub fn artifact(&self, name: &str) -> Result<Artifact, ArtifactError> {
        self.made.get(name)
    }

    /// Of the step's record. A record written before streams were kept apart has only the
    /// end of both, mixed: it is given as stdout, marked truncated.
    pub(super) fn of(record: &StepRecord, made: Made) -> Self {
        let (stdout, stderr, truncated) = match &record.produced.streams {
            Some(s) => (s.stdout.clone(), s.stderr.clone(), s.cut),
            None => (record.produced.stdout_tail.clone(), String::new(), true),
        };
        Self {
            exit_code: record.produced.exit_code,
            stdout,
            stderr,
            truncated,
            made,
        }
    }
}

/// What an agent step gave back (as its record keeps it).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    /// The end of its final answer (the last 4 KiB, secrets masked); a longer result
    /// belongs in an output artifact or a typed answer.
    pub text: String,
    /// The verdict it picked, with `verdicts`.
    pub verdict: Option<String>,
    /// The reason it gave with its verdict.
    pub note: Option<String>,
    made: Made,
}

impl AgentReply {
    /// Output artifact `name` of the step (one of its `outputs`), or
    /// [`ArtifactError::NotDeclared`].
    pub fn artifact(&self, name: &str) -> Result<Artifact, ArtifactError> {
        self.made.get(name)
    }
}

impl AgentReply {
    /// Of the step's record.
    pub(super) fn of(record: StepRecord, made: Made) -> Self {
        Self {
            text: record.produced.stdout_tail,
            verdict: record.produced.verdict,
            note: record.produced.note,
            made,
        }
    }
}
