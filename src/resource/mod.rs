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

use crate::pipeline::{Loaded, Resource};
use std::path::Path;

/// A resource with what its type needs to run it.
pub enum Kind<'a> {
    /// The built-in git type.
    Git(GitSource),
    /// The built-in time type.
    Time(time::TimeSource),
    /// A type of `resource_types:`.
    Scripted(scripted::Scripted<'a>),
}

impl<'a> Kind<'a> {
    /// The resource named `name` in `loaded`, with its type.
    pub fn of(loaded: &'a Loaded, name: &str) -> Result<Self, ResourceError> {
        let r = loaded
            .pipeline
            .resources
            .iter()
            .find(|r| r.name.value == name)
            .ok_or_else(|| ResourceError::Unknown(name.to_owned()))?;
        match r.kind.value.as_str() {
            "git" => Ok(Kind::Git(GitSource::resolved(r, &loaded.dir)?)),
            "time" => Ok(Kind::Time(time::TimeSource::of(r)?)),
            other => loaded
                .pipeline
                .resource_types
                .iter()
                .find(|t| t.name.value == other)
                .map(|kind| Kind::Scripted(scripted::Scripted { resource: r, kind }))
                .ok_or_else(|| match other {
                    "slack-mentions" | "slack-reply" => ResourceError::Unavailable {
                        name: name.to_owned(),
                        kind: other.to_owned(),
                    },
                    _ => ResourceError::Type {
                        name: name.to_owned(),
                        kind: other.to_owned(),
                    },
                }),
        }
    }
}

/// `version` of `resource` written as a get holds it: a git resource's commit, any other
/// type's version as canonical JSON.
pub fn version_text(loaded: &Loaded, resource: &str, version: &crate::pipeline::Version) -> String {
    match Kind::of(loaded, resource) {
        Ok(Kind::Git(_)) => version.get("ref").cloned().unwrap_or_default(),
        _ => history::canonical(version),
    }
}

/// A git resource's `source:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    /// Where the repository is: a URL, a `file://` URI or a local path.
    pub uri: String,
    /// The branch (default `main`).
    pub branch: String,
}

/// Why a resource cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// The step names a resource the file does not define.
    #[error("there is no resource `{0}`")]
    Unknown(String),
    /// The type is neither built in nor defined.
    #[error(
        "resource `{name}` has type `{kind}`, which is neither built in (`git`, `time`, `slack-mentions`, `slack-reply`) nor under `resource_types:`"
    )]
    Type {
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
    /// `source:` lacks `uri`, or has a wrong value.
    #[error("resource `{0}` needs `source: {{ uri: ..., branch: ... }}` with string values")]
    Source(String),
    /// A `time` resource's `source:` is wrong.
    #[error("resource `{name}`: {why}")]
    TimeSource {
        /// The resource.
        name: String,
        /// What is wrong.
        why: String,
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

impl GitSource {
    /// Reads a resource's source.
    pub fn of(resource: &Resource) -> Result<Self, ResourceError> {
        let name = &resource.name.value;
        if resource.kind.value != "git" {
            return Err(ResourceError::Type {
                name: name.clone(),
                kind: resource.kind.value.clone(),
            });
        }
        let text = |key: &str| match resource.source.get(key) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(ResourceError::Source(name.clone())),
        };
        let uri = text("uri")?.ok_or_else(|| ResourceError::Source(name.clone()))?;
        let branch = text("branch")?.unwrap_or_else(|| "main".to_owned());
        Ok(Self { uri, branch })
    }

    /// Reads a resource's source, a relative local `uri` taken from `pipeline_dir` (the
    /// directory of the pipeline file) and made absolute: git runs in other directories
    /// (a mirror under `.treadle/git/`), where a relative path would mean something else.
    pub fn resolved(resource: &Resource, pipeline_dir: &Path) -> Result<Self, ResourceError> {
        let mut src = Self::of(resource)?;
        // `scp`-like `host:path` and URLs (`scheme://`) are remote; the rest is a path.
        let local = !src.uri.contains(':');
        if local && !src.uri.starts_with('/') {
            let path = pipeline_dir.join(&src.uri);
            let path = std::path::absolute(&path).unwrap_or(path);
            src.uri = path.to_string_lossy().into_owned();
        }
        Ok(src)
    }
}
