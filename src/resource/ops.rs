//! What `get:` and `put:` do to a git resource, as blocking functions over paths: each
//! takes the resource's source, the local mirror it works through and the directory or
//! tree it reads or writes, and knows nothing of runs, steps or the transcript (the
//! executor's side is `crate::run::exec::resource`).

use std::path::Path;

use super::git::{self, GitError};
use super::{GitSource, ResourceError};
use crate::pipeline::{Loaded, ResolvedResource};

/// The source of the git resource named `name` in the pipeline (read at load, a relative
/// local path taken from the pipeline's directory).
pub fn source(loaded: &Loaded, name: &str) -> Result<GitSource, ResourceError> {
    let r = super::typed(loaded, name)?;
    match &r.kind {
        ResolvedResource::Git(src) => Ok(src.clone()),
        _ => Err(ResourceError::NotGit {
            name: name.to_owned(),
            kind: r.spec.kind.value.clone(),
        }),
    }
}

/// The commit the resource's branch is at now.
pub fn latest(src: &GitSource) -> Result<String, ResourceError> {
    Ok(git::resolve(&src.uri, &src.branch)?)
}

/// Fetches `commit` (the branch's latest when `None`) into `mirror` and writes its tree to
/// `dest`; the commit fetched.
pub fn fetch(
    src: &GitSource,
    mirror: &Path,
    commit: Option<String>,
    dest: &Path,
) -> Result<String, ResourceError> {
    let commit = match commit {
        Some(c) => c,
        None => latest(src)?,
    };
    git::fetch(mirror, &src.uri, &src.branch, &commit)?;
    git::export(mirror, &commit, dest)?;
    Ok(commit)
}

/// Commits the tree at `tree` on top of the branch (creating the branch when it does not
/// exist) and pushes it; the new commit.
pub fn publish(
    src: &GitSource,
    mirror: &Path,
    tree: &Path,
    message: &str,
) -> Result<String, ResourceError> {
    let parent = match git::resolve(&src.uri, &src.branch) {
        Ok(c) => {
            git::fetch(mirror, &src.uri, &src.branch, &c)?;
            Some(c)
        }
        // Pushing creates the branch.
        Err(GitError::NoBranch { .. }) => {
            git::fetch_init(mirror)?;
            None
        }
        Err(e) => return Err(e.into()),
    };
    commit_on(src, mirror, tree, parent.as_deref(), message)
}

/// Commits the tree at `tree` on top of `parent` and pushes it to the branch; the new
/// commit.
pub fn commit_on(
    src: &GitSource,
    mirror: &Path,
    tree: &Path,
    parent: Option<&str>,
    message: &str,
) -> Result<String, ResourceError> {
    let commit = git::commit_tree(mirror, tree, parent, message)?;
    git::push(mirror, &src.uri, &commit, &src.branch)?;
    Ok(commit)
}
