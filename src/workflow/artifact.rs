//! Handles on the output artifacts a workflow's step made ([`Artifact`]): what a step's
//! result gives for the name of one of its declared outputs (`result.artifact("logs")?`),
//! and [`FlowError::ArtifactNotDeclared`] for a name it did not declare, so a typo is a
//! typed error at the call, not a missing file later.

use std::path::{Path, PathBuf};

use super::flow::{Flow, FlowError};
use crate::pipeline::Step;

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
    /// [`FlowError::Unevaluable`].
    pub fn path(&self) -> Result<&Path, FlowError> {
        self.path.as_deref().ok_or_else(|| FlowError::Unevaluable {
            step: self.step.clone(),
            what: format!("its artifact `{}`", self.name),
        })
    }

    /// The bytes of `file` in it (a path relative to the artifact's directory).
    pub async fn read(&self, file: impl AsRef<Path>) -> Result<Vec<u8>, FlowError> {
        let file = file.as_ref();
        let path = self.path()?.join(file);
        tokio::fs::read(&path)
            .await
            .map_err(|source| self.unreadable(file, source))
    }

    /// The text of `file` in it (UTF-8).
    pub async fn read_to_string(&self, file: impl AsRef<Path>) -> Result<String, FlowError> {
        let file = file.as_ref();
        let path = self.path()?.join(file);
        tokio::fs::read_to_string(&path)
            .await
            .map_err(|source| self.unreadable(file, source))
    }

    fn unreadable(&self, file: &Path, source: std::io::Error) -> FlowError {
        FlowError::ArtifactRead {
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
    /// The `declared` outputs of step `name` (just run on `flow`), each where it is now.
    pub(super) fn of(flow: &Flow, name: &str, declared: &[String]) -> Self {
        let artifacts = declared
            .iter()
            .map(|o| Artifact {
                step: name.to_owned(),
                name: o.clone(),
                path: flow.artifact(o),
            })
            .collect();
        Self {
            step: name.to_owned(),
            artifacts,
        }
    }

    /// The handle of artifact `name`: [`FlowError::ArtifactNotDeclared`] unless the step
    /// declared it.
    pub(super) fn get(&self, name: &str) -> Result<Artifact, FlowError> {
        self.artifacts
            .iter()
            .find(|a| a.name == name)
            .cloned()
            .ok_or_else(|| FlowError::ArtifactNotDeclared {
                step: self.step.clone(),
                name: name.to_owned(),
                declared: self.artifacts.iter().map(|a| a.name.clone()).collect(),
            })
    }
}
