//! Work kept only when committed: which artifacts of an agent step are a git repository
//! the run manages, what becomes of the agent's changes there, and the git plumbing of it.
//!
//! **The rule** ([`managed_work`], the one place it is decided, for YAML steps and for
//! every other front end that hands the executor a `pipeline::Step`): an agent step's
//! managed artifacts are its inputs that came from a `get:` of a git resource (or from an
//! earlier step's commit on one) and that it also lists under `outputs:` (only those are
//! writable and collected). When the step succeeds, each one is either
//!
//! * committed ([`Keep::Commit`], `commit: MESSAGE`): the tree the agent left becomes one
//!   commit on top of the commit the step started from, pushed to **the run's branch**
//!   ([`run_branch`], `treadle/run-N` on the resource's remote), or
//! * wiped ([`Keep::Wipe`], no `commit:`): the artifact goes back to the tree the step
//!   started from.
//!
//! Every other artifact (a task's outputs, an agent's plain outputs) is never touched, so
//! pipelines whose agents write files for later steps work as before. A step that fails
//! commits nothing, and its changes are not collected either.
//!
//! The agent's copy has no `.git` (a `get` exports the tree only), so the one commit is
//! made from the files it left; a repository it made itself (`git init`, `git commit`
//! through `run_shell`) is dropped before the commit ([`drop_git_dirs`]): its commits are
//! replaced by the step's one commit.

use std::path::Path;

use crate::pipeline::{AgentCall, Step, StepKind};
use crate::resource::GitSource;
use crate::resource::git::{self, GitError};

/// The branch a run's committed agent work goes to: its own, so that an agent never moves
/// a branch people share (publishing is a `put:`), and a commit cannot trigger the run's
/// own `get` again.
pub fn run_branch(run: u64) -> String {
    format!("treadle/run-{run}")
}

/// What becomes of an agent's changes to a managed artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// One commit with this message (blank messages are refused when the file loads).
    Commit(String),
    /// Back to the tree the step started from.
    Wipe,
}

/// An artifact that holds a git resource's tree: the resource's source, resolved at load
/// (so committing to it looks nothing up by name), and the commit the tree is at. Only a
/// `get:` of a git resource (run or replayed) and a commit on one make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitInput {
    /// The git resource's source.
    pub source: GitSource,
    /// The commit the artifact holds.
    pub commit: String,
}

/// One managed artifact of a step and what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedWork {
    /// The artifact.
    pub artifact: String,
    /// The git resource it came from, and the commit the step started from (the fetched
    /// one, or an earlier step's).
    pub base: GitInput,
    /// Commit or wipe.
    pub keep: Keep,
}

/// The step's `commit:` message, if it has a non-blank one (the only reader of the key).
pub fn commit_message(call: &AgentCall) -> Option<&str> {
    call.commit
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
}

/// The rule: the managed artifacts of `step` and what becomes of each when it succeeds.
/// `git_input` answers, for an artifact, the git resource and commit it holds, if any.
pub fn managed_work(step: &Step, git_input: impl Fn(&str) -> Option<GitInput>) -> Vec<ManagedWork> {
    let StepKind::Agent(call) = &step.kind else {
        return Vec::new();
    };
    let keep = match commit_message(call) {
        Some(m) => Keep::Commit(m.to_owned()),
        None => Keep::Wipe,
    };
    step.inputs
        .iter()
        .filter(|i| step.outputs.iter().any(|o| o.value == i.value))
        .filter_map(|i| {
            git_input(&i.value).map(|base| ManagedWork {
                artifact: i.value.clone(),
                base,
                keep: keep.clone(),
            })
        })
        .collect()
}

/// The full commit message: the step's, then trailers naming the run and step that made
/// it, so a commit on a branch can be traced back to its transcript.
pub fn commit_text(message: &str, run: u64, step: &str) -> String {
    format!(
        "{}\n\nTreadle-Run: {run}\nTreadle-Step: {step}\n",
        message.trim()
    )
}

/// Commits the tree at `tree` on top of `base` in `mirror` and moves `branch` on `uri` to
/// it; the new commit. A `.git` the agent made inside the tree is dropped first.
pub fn commit_work(
    mirror: &Path,
    uri: &str,
    tree: &Path,
    base: &str,
    message: &str,
    branch: &str,
) -> Result<String, GitError> {
    drop_git_dirs(tree)?;
    let commit = git::commit_tree(mirror, tree, Some(base), message)?;
    git::force_push(mirror, uri, &commit, branch)?;
    Ok(commit)
}

/// A replayed step's commit brought back on `branch`: the recorded `commit` itself when
/// its parent is `base` (the commit this run's artifact is at), else a commit of the same
/// tree and message on `base` (an earlier step ran again and made a new commit of the same
/// tree). `made_on` is the branch it was pushed to, fetched from when the mirror lost it.
pub fn restore_commit(
    mirror: &Path,
    uri: &str,
    commit: &str,
    base: &str,
    made_on: &str,
    branch: &str,
) -> Result<String, GitError> {
    if !git::has_commit(mirror, commit) {
        git::fetch(mirror, uri, made_on, commit)?;
    }
    let parent = rev_parse(mirror, &format!("{commit}^"))?;
    let kept = if parent == base {
        commit.to_owned()
    } else {
        let tree = rev_parse(mirror, &format!("{commit}^{{tree}}"))?;
        let mut log = git::git();
        log.arg("-C")
            .arg(mirror)
            .args(["log", "-1", "--format=%B", commit]);
        let message = git::output(log, "log")?;
        let mut c = git::git();
        c.arg("-C")
            .arg(mirror)
            .args(["commit-tree", &tree, "-p", base, "-m", &message]);
        git::with_identity(&mut c);
        git::output(c, "commit-tree")?
    };
    git::force_push(mirror, uri, &kept, branch)?;
    Ok(kept)
}

fn rev_parse(mirror: &Path, rev: &str) -> Result<String, GitError> {
    let mut c = git::git();
    c.arg("-C")
        .arg(mirror)
        .args(["rev-parse", "--verify", "--quiet", rev]);
    git::output(c, "rev-parse")
}

/// Removes every `.git` (a repository, or a worktree's `.git` file) under `dir`, without
/// following links; how many were removed. Committing the tree would otherwise record a
/// nested repository as a submodule link, and later steps would see its history.
pub fn drop_git_dirs(dir: &Path) -> Result<usize, GitError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GitError::Io {
            what: "cannot remove the agent's own repository",
            path,
            source,
        }
    };
    let mut removed = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let entry = entry.map_err(io(&d))?;
            let (path, kind) = (entry.path(), entry.file_type().map_err(io(&d))?);
            if entry.file_name() == ".git" {
                if kind.is_dir() {
                    std::fs::remove_dir_all(&path).map_err(io(&path))?;
                } else {
                    std::fs::remove_file(&path).map_err(io(&path))?;
                }
                removed += 1;
            } else if kind.is_dir() {
                todo.push(path);
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::At;

    fn agent_step(inputs: &[&str], outputs: &[&str], commit: Option<&str>) -> Step {
        let at = |s: &&str| At::new((*s).to_owned());
        let mut step = Step::agent(AgentCall {
            commit: commit.map(str::to_owned),
            ..AgentCall::new(std::sync::Arc::new(crate::pipeline::Agent {
                name: At::new("coder".to_owned()),
                ..crate::pipeline::Agent::default()
            }))
        });
        step.inputs = inputs.iter().map(at).collect();
        step.outputs = outputs.iter().map(at).collect();
        step
    }

    fn repo_at_abc() -> GitInput {
        GitInput {
            source: GitSource {
                uri: "/srv/repo.git".into(),
                branch: "main".into(),
            },
            commit: "abc".into(),
        }
    }

    fn from_git(artifact: &str) -> Option<GitInput> {
        (artifact == "repo").then(repo_at_abc)
    }

    #[test]
    fn only_git_inputs_the_step_may_change_are_managed() {
        // `notes` is no git input; `repo` is an input only (read-only, never collected).
        let step = agent_step(&["repo", "notes"], &["notes"], Some("m"));
        assert!(managed_work(&step, from_git).is_empty());
        let step = agent_step(&["repo", "notes"], &["repo", "notes"], Some(" keep it "));
        assert_eq!(
            managed_work(&step, from_git),
            vec![ManagedWork {
                artifact: "repo".into(),
                base: repo_at_abc(),
                keep: Keep::Commit("keep it".into()),
            }]
        );
    }

    #[test]
    fn without_a_message_the_work_is_wiped_and_other_kinds_are_untouched() {
        let step = agent_step(&["repo"], &["repo"], None);
        assert_eq!(managed_work(&step, from_git)[0].keep, Keep::Wipe);
        let mut task = agent_step(&["repo"], &["repo"], Some("m"));
        task.kind = StepKind::Task {
            name: At::new("t".to_owned()),
            run: At::new(crate::pipeline::RunSpec::Shell("true".into())),
            keys: crate::pipeline::TaskKeys::default(),
        };
        assert!(managed_work(&task, from_git).is_empty());
    }

    #[test]
    fn nested_repositories_are_dropped_and_links_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/objects")).expect("mkdir");
        std::fs::create_dir_all(root.join("sub/.git")).expect("mkdir");
        std::fs::write(root.join("wt.git"), "not a repository").expect("write");
        std::fs::create_dir_all(root.join("deeper")).expect("mkdir");
        std::fs::write(root.join("deeper/.git"), "gitdir: elsewhere").expect("write");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(outside.path().join(".git")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), root.join("link")).expect("link");
        assert_eq!(drop_git_dirs(root).expect("dropped"), 3);
        assert!(!root.join(".git").exists() && !root.join("sub/.git").exists());
        assert!(root.join("wt.git").exists() && root.join("sub").exists());
        assert!(
            outside.path().join(".git").exists(),
            "a link is not followed"
        );
    }
}
