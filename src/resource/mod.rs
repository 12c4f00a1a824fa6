//! Resources: what `get:` fetches and `put:` publishes, and the versions they have.
//!
//! # Layout
//!
//! * `git`: the built-in `git` type, through the `git` command;
//! * `ops`: what `get:` and `put:` do to a git resource, as functions over paths (the
//!   executor runs the steps, in `crate::run::exec::resource`);
//! * `time`: the built-in `time` type (`interval:`);
//! * `script`: running one script, confined, with a timeout;
//! * `scripted`: types written as `check`/`in`/`out` scripts (`resource_types:`);
//! * `expr`: types whose stages are expressions (`config.expr:`), evaluated in-process;
//! * `history`: the versions checks reported and the `every` cursors, in the state file;
//! * `puts`: the versions `put:` steps published, recorded in the history and per run;
//! * `check`: [`check::Checker`], checking a resource and recording its versions (the API
//!   a watcher uses).

pub mod check;
pub mod expr;
pub mod git;
pub mod history;
pub mod ops;
pub mod puts;
pub mod script;
pub mod scripted;
pub mod time;

use crate::pipeline::{Loaded, ResolvedResource, TypedResource};

pub use crate::pipeline::typed_resource::GitSource;

/// The resource named `name` in `loaded`, its type resolved at load.
pub fn typed<'a>(loaded: &'a Loaded, name: &str) -> Result<&'a TypedResource, ResourceError> {
    loaded
        .resources
        .get(name)
        .map(AsRef::as_ref)
        .ok_or_else(|| ResourceError::Unknown(name.to_owned()))
}

impl ResourceError {
    /// A get or put of `resource`, whose type this treadle loads but cannot run.
    pub fn unavailable(resource: &TypedResource) -> Self {
        ResourceError::Unavailable {
            name: resource.name().to_owned(),
            kind: resource.spec.kind.value.clone(),
        }
    }
}

/// `version` of `resource` written as a get holds it: a git resource's commit, any other
/// type's version as canonical JSON.
pub fn version_text(loaded: &Loaded, resource: &str, version: &crate::pipeline::Version) -> String {
    match loaded.resources.get(resource) {
        Some(typed) => typed.version_text(version),
        None => history::canonical(version),
    }
}

impl TypedResource {
    /// `version` of this resource written as a get holds it: a git resource's commit,
    /// any other type's version as canonical JSON.
    pub fn version_text(&self, version: &crate::pipeline::Version) -> String {
        match &self.kind {
            ResolvedResource::Git(_) => version.get("ref").cloned().unwrap_or_default(),
            _ => history::canonical(version),
        }
    }
}

/// Why a resource cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// The step names a resource the file does not define.
    #[error("there is no resource `{0}`")]
    Unknown(String),
    /// What needs a git resource was given one of another type.
    #[error("resource `{name}` has type `{kind}`, not `git`")]
    NotGit {
        /// The resource.
        name: String,
        /// Its type.
        kind: String,
    },
    /// A built-in type of `steps` that this treadle loads but cannot run.
    #[error(
        "resource `{name}` has type `{kind}`, a built-in type of `steps` that this treadle loads and checks but cannot run (it talks to Slack's HTTP API); write a `resource_types:` entry with `check:`/`in:`/`out:` scripts for it"
    )]
    Unavailable {
        /// The resource.
        name: String,
        /// Its type.
        kind: String,
    },
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] git::GitError),
}

impl From<crate::blocking::WorkerStopped> for ResourceError {
    /// Git work that stopped without returning is a failed git operation.
    fn from(stopped: crate::blocking::WorkerStopped) -> Self {
        ResourceError::Git(git::GitError::Failed {
            what: "task",
            detail: stopped.to_string(),
        })
    }
}
