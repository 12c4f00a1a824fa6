//! The built-in `git` resource, driven through the `git` command.
//!
//! * [`resolve`] asks the remote which commit a branch is at (`git ls-remote`): this is
//!   the resource's version, so the same commit gives the same step key and a re-run
//!   fetches nothing;
//! * [`fetch`] brings that commit into a bare mirror under `.treadle/git/` (one per URI,
//!   kept between runs so later fetches are incremental) and [`export`] writes its tree,
//!   without `.git`, into the step's artifact;
//! * [`commit_tree`] + [`push`] publish a directory as a commit on a branch (`put`);
//!   [`force_push`] moves a run's own branch (an agent's work with `commit:`, see
//!   `crate::agent::commit`).
//!
//! `GIT_TERMINAL_PROMPT=0` everywhere: a remote that asks for credentials fails at once
//! instead of waiting for a terminal that is not there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors of git operations, each naming the remote and what to check.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The `git` program is missing.
    #[error("cannot run git: {0} (the git resource needs the `git` command on PATH)")]
    NoGit(std::io::Error),
    /// The remote cannot be read.
    #[error("cannot reach git repository `{uri}`: {detail}")]
    Unreachable {
        /// The URI.
        uri: String,
        /// What git said.
        detail: String,
    },
    /// The branch does not exist on the remote.
    #[error("git repository `{uri}` has no branch `{branch}`")]
    NoBranch {
        /// The URI.
        uri: String,
        /// The branch.
        branch: String,
    },
    /// Another git command failed.
    #[error("git {what} failed: {detail}")]
    Failed {
        /// Which operation.
        what: &'static str,
        /// What git said.
        detail: String,
    },
    /// A local file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

pub(crate) fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    c
}

pub(crate) fn output(mut cmd: Command, what: &'static str) -> Result<String, GitError> {
    let out = cmd.output().map_err(GitError::NoGit)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    Err(GitError::Failed {
        what,
        detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

/// The commit `branch` is at on `uri`.
pub fn resolve(uri: &str, branch: &str) -> Result<String, GitError> {
    let mut cmd = git();
    cmd.args(["ls-remote", "--", uri, &format!("refs/heads/{branch}")]);
    let listed = output(cmd, "ls-remote").map_err(|e| match e {
        GitError::Failed { detail, .. } => GitError::Unreachable {
            uri: uri.to_owned(),
            detail: detail
                .lines()
                .find(|l| l.starts_with("fatal:"))
                .unwrap_or(&detail)
                .to_owned(),
        },
        other => other,
    })?;
    listed
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(_, r)| *r == format!("refs/heads/{branch}"))
        .map(|(c, _)| c.to_owned())
        .ok_or_else(|| GitError::NoBranch {
            uri: uri.to_owned(),
            branch: branch.to_owned(),
        })
}

/// The mirror directory of `uri` under `git_dir`.
pub fn mirror_of(git_dir: &Path, uri: &str) -> PathBuf {
    let h = blake3::hash(uri.as_bytes()).to_hex();
    git_dir.join(format!("{}.git", &h.as_str()[..16]))
}

/// Creates the bare mirror if it is not there yet.
pub fn fetch_init(mirror: &Path) -> Result<(), GitError> {
    if !mirror.join("HEAD").exists() {
        std::fs::create_dir_all(mirror).map_err(|source| GitError::Io {
            what: "cannot create",
            path: mirror.to_path_buf(),
            source,
        })?;
        let mut init = git();
        init.args(["init", "--quiet", "--bare"]).arg(mirror);
        output(init, "init")?;
    }
    Ok(())
}

/// Makes sure `commit` (the tip of `branch` on `uri`) is in the mirror.
pub fn fetch(mirror: &Path, uri: &str, branch: &str, commit: &str) -> Result<(), GitError> {
    fetch_init(mirror)?;
    if has_commit(mirror, commit) {
        return Ok(());
    }
    let mut f = git();
    f.arg("-C")
        .arg(mirror)
        .args(["fetch", "--quiet", "--no-tags", "--", uri])
        .arg(format!("+refs/heads/{branch}:refs/heads/{branch}"));
    output(f, "fetch").map_err(|e| match e {
        GitError::Failed { detail, .. } => GitError::Unreachable {
            uri: uri.to_owned(),
            detail,
        },
        other => other,
    })?;
    if has_commit(mirror, commit) {
        Ok(())
    } else {
        Err(GitError::Failed {
            what: "fetch",
            detail: format!("commit {commit} of `{branch}` did not arrive from {uri}"),
        })
    }
}

pub(crate) fn has_commit(mirror: &Path, commit: &str) -> bool {
    let mut c = git();
    c.arg("-C")
        .arg(mirror)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    c.output().is_ok_and(|o| o.status.success())
}

/// Writes the tree of `commit` into `dest` (an existing, empty directory).
pub fn export(mirror: &Path, commit: &str, dest: &Path) -> Result<(), GitError> {
    // `git -C` changes directory: every path handed to it must be absolute.
    let dest = absolute(dest)?;
    let tar = dest.with_extension("tar");
    let mut a = git();
    a.arg("-C")
        .arg(mirror)
        .args(["archive", "--format=tar", "-o"])
        .arg(&tar)
        .arg(commit);
    output(a, "archive")?;
    let mut x = Command::new("tar");
    x.arg("-xf").arg(&tar).arg("-C").arg(&dest);
    let r = output(x, "archive extraction");
    // Best effort: the tarball is scratch in the step's directory.
    let _ = std::fs::remove_file(&tar);
    r.map(|_| ())
}

/// Makes a commit in the mirror whose tree is `dir`'s content, with `parent` (if any).
pub fn commit_tree(
    mirror: &Path,
    dir: &Path,
    parent: Option<&str>,
    message: &str,
) -> Result<String, GitError> {
    let (mirror, dir) = (&absolute(mirror)?, &absolute(dir)?);
    let index = mirror.join(format!("treadle-index-{}", std::process::id()));
    let with_index = |args: &[&str]| {
        let mut c = git();
        c.env("GIT_INDEX_FILE", &index)
            .arg("--git-dir")
            .arg(mirror)
            .arg("--work-tree")
            .arg(dir)
            .args(args);
        c
    };
    let added = output(with_index(&["add", "--all", "--force", "."]), "add");
    let tree = added.and_then(|_| output(with_index(&["write-tree"]), "write-tree"));
    // Best effort: a leftover index file is ignored by every later command.
    let _ = std::fs::remove_file(&index);
    let tree = tree?;
    let mut c = git();
    c.arg("--git-dir").arg(mirror).args(["commit-tree", &tree]);
    if let Some(p) = parent {
        c.args(["-p", p]);
    }
    c.args(["-m", message]);
    with_identity(&mut c);
    output(c, "commit-tree")
}

/// Commits made by treadle are authored by `treadle <treadle@localhost>`, unless treadle's
/// own environment names someone (`GIT_AUTHOR_NAME` and the rest).
pub(crate) fn with_identity(c: &mut Command) {
    for (var, value) in [
        ("GIT_AUTHOR_NAME", "treadle"),
        ("GIT_AUTHOR_EMAIL", "treadle@localhost"),
        ("GIT_COMMITTER_NAME", "treadle"),
        ("GIT_COMMITTER_EMAIL", "treadle@localhost"),
    ] {
        if std::env::var_os(var).is_none() {
            c.env(var, value);
        }
    }
}

/// Pushes `commit` from the mirror to `branch` on `uri`.
pub fn push(mirror: &Path, uri: &str, commit: &str, branch: &str) -> Result<(), GitError> {
    push_ref(mirror, uri, &format!("{commit}:refs/heads/{branch}"))
}

/// Sets `branch` on `uri` to `commit` whatever it pointed at: for a branch treadle owns
/// (a run's branch, which follows the run's work, also back to an earlier commit).
pub fn force_push(mirror: &Path, uri: &str, commit: &str, branch: &str) -> Result<(), GitError> {
    push_ref(mirror, uri, &format!("+{commit}:refs/heads/{branch}"))
}

fn push_ref(mirror: &Path, uri: &str, refspec: &str) -> Result<(), GitError> {
    let mut p = git();
    p.arg("-C")
        .arg(mirror)
        .args(["push", "--quiet", "--", uri, refspec]);
    output(p, "push").map(|_| ())
}

fn absolute(path: &Path) -> Result<PathBuf, GitError> {
    std::path::absolute(path).map_err(|source| GitError::Io {
        what: "cannot resolve",
        path: path.to_path_buf(),
        source,
    })
}
