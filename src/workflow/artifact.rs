//! Handles on the output artifacts a workflow's step made ([`Artifact`]): what a step's
//! result gives for the name of one of its declared outputs (`result.artifact("logs")?`),
//! and [`ArtifactError::NotDeclared`] for a name it did not declare, so a typo is a
//! typed error at the call, not a missing file later.
//!
//! Below `flow.rs` (a failed step's error holds its output, which holds these handles),
//! so it has an error of its own, which `?` turns into a `FlowError`.

use std::path::{Path, PathBuf};

use crate::pipeline::Step;

/// Why an output artifact of a step could not be had or read. In a workflow, `?` makes
/// it a `FlowError` (`FlowError::Artifact`; in a plan, `FlowError::Unevaluable`).
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A step's result was asked for an output artifact the step did not declare.
    #[error(
        "step `{step}` has no output artifact `{name}` ({})",
        declared_list(.declared)
    )]
    NotDeclared {
        /// The step.
        step: String,
        /// The name asked for.
        name: String,
        /// The outputs it declared.
        declared: Vec<String>,
    },
    /// A file of a step's output artifact could not be read.
    #[error("step `{step}`: cannot read `{}` of its artifact `{name}`: {source}", .file.display())]
    Read {
        /// The step.
        step: String,
        /// The artifact.
        name: String,
        /// The file, relative to the artifact.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// In a plan (`workflow::plan`) the step did not run: its artifact has no files.
    #[error("the artifact `{name}` of `{step}` exists only once the step runs")]
    Unevaluable {
        /// The step.
        step: String,
        /// The artifact.
        name: String,
    },
}

/// The outputs a step declared, for [`ArtifactError::NotDeclared`]'s message.
fn declared_list(declared: &[String]) -> String {
    match declared {
        [] => "it declared none".to_owned(),
        names => format!(
            "its outputs: {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// An output artifact of a step: a directory of the files the step left in it, where the
/// step left them (a later step that outputs the same name makes a new one; this handle
/// keeps the one its step made). Valid while the run goes on: a run that succeeds
/// discards its steps' directories at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    step: String,
    name: String,
    /// Where it is; `None` in a plan, where no step runs.
    path: Option<PathBuf>,
}

impl Artifact {
    /// Its name (the step's `outputs:` entry).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The step that made it.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Its directory. In a plan ([`super::plan()`]) the step did not run:
    /// [`ArtifactError::Unevaluable`].
    pub fn path(&self) -> Result<&Path, ArtifactError> {
        self.path
            .as_deref()
            .ok_or_else(|| ArtifactError::Unevaluable {
                step: self.step.clone(),
                name: self.name.clone(),
            })
    }

    /// The bytes of `file` in it (a path relative to the artifact's directory).
    pub async fn read(&self, file: impl AsRef<Path>) -> Result<Vec<u8>, ArtifactError> {
        let file = file.as_ref();
        let path = self.path()?.join(file);
        tokio::fs::read(&path)
            .await
            .map_err(|source| self.unreadable(file, source))
    }

    /// The text of `file` in it (UTF-8).
    pub async fn read_to_string(&self, file: impl AsRef<Path>) -> Result<String, ArtifactError> {
        let file = file.as_ref();
        let path = self.path()?.join(file);
        tokio::fs::read_to_string(&path)
            .await
            .map_err(|source| self.unreadable(file, source))
    }

    fn unreadable(&self, file: &Path, source: std::io::Error) -> ArtifactError {
        ArtifactError::Read {
            step: self.step.clone(),
            name: self.name.clone(),
            file: file.to_path_buf(),
            source,
        }
    }
}

/// The output artifacts `step` declares (`outputs:`).
pub(super) fn declared(step: &Step) -> Vec<String> {
    step.outputs.iter().map(|o| o.value.clone()).collect()
}

/// The output artifacts a step declared, as its result holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Made {
    step: String,
    artifacts: Vec<Artifact>,
}

impl Made {
    /// The `declared` outputs of step `name` (just run), each where `place` says it is
    /// now (the run's `Flow::artifact`; `None` in a plan).
    pub(super) fn of(
        name: &str,
        declared: &[String],
        place: impl Fn(&str) -> Option<PathBuf>,
    ) -> Self {
        let artifacts = declared
            .iter()
            .map(|o| Artifact {
                step: name.to_owned(),
                name: o.clone(),
                path: place(o),
            })
            .collect();
        Self {
            step: name.to_owned(),
            artifacts,
        }
    }

    /// The handle of artifact `name`: [`ArtifactError::NotDeclared`] unless the step
    /// declared it.
    pub(super) fn get(&self, name: &str) -> Result<Artifact, ArtifactError> {
        self.artifacts
            .iter()
            .find(|a| a.name == name)
            .cloned()
            .ok_or_else(|| ArtifactError::NotDeclared {
                step: self.step.clone(),
                name: name.to_owned(),
                declared: self.artifacts.iter().map(|a| a.name.clone()).collect(),
            })
    }
}
