//! Resources: what `get:` fetches and `put:` publishes. `git` is built in (`git.rs`);
//! `ops.rs` is what `get:` and `put:` do, as functions over paths (the executor runs the
//! steps, in `crate::run::resource`).

pub mod git;
pub mod ops;

use crate::pipeline::Resource;
use std::path::Path;

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
    /// Only `git` is built in.
    #[error("resource `{name}` has type `{kind}`; only `git` is built in")]
    Type {
        /// The resource.
        name: String,
        /// Its type.
        kind: String,
    },
    /// `source:` lacks `uri`, or has a wrong value.
    #[error("resource `{0}` needs `source: {{ uri: ..., branch: ... }}` with string values")]
    Source(String),
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] git::GitError),
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
