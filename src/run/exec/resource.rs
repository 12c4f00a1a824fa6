//! Running `get:` and `put:` on the built-in git resource, and keeping or wiping an agent
//! step's work on the git artifacts the run manages.
//!
//! Which artifacts those are, and whether the work is committed or wiped, is one rule
//! (`crate::agent::commit::managed_work`); here is the executor's side of it: after the
//! step succeeded, a commit on the run's branch (`treadle/run-N`) or the artifact back to
//! the tree the step started from, and a replayed step's commit brought back on the
//! replaying run's branch.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Ctx, Done};
use crate::agent::commit::{self, GitInput, Keep, ManagedWork};
use crate::blocking::blocking;
use crate::cache::records::SuccessRecord;
use crate::pipeline::Version;
use crate::pipeline::outline::Entry;
use crate::pipeline::{GetStep, PutStep, Step};
use crate::pipeline::{ResolvedResource, TypedResource};
use crate::resource::{GitSource, ResourceError, git, ops};
use crate::run::artifacts::copy_tree;
use crate::run::failure::FailureKind;
use tokio_util::sync::CancellationToken;

fn git_dir<'a>(ctx: &Ctx<'a>) -> PathBuf {
    ctx.cache
        .as_ref()
        .map_or_else(|| ctx.artifacts.root().join("git"), |c| c.git_dir.clone())
}

/// Where a `get:` or `put:` goes: a git resource handled here, or a versioned one (`time`,
/// a `resource_types:` entry) handled in `resource_scripted`.
enum Target {
    Git(GitSource),
    Versioned,
}

/// Where the resource of a `get:` or `put:` (resolved at load) goes. An unavailable one
/// is an error here, when the step runs, and not at load: it is a fact about this
/// treadle (it cannot talk to Slack), not a name that failed to resolve, and a file
/// with one loads and checks (and may run its other jobs).
fn target(typed: &TypedResource) -> Result<Target, ResourceError> {
    match &typed.kind {
        ResolvedResource::Git(s) => Ok(Target::Git(s.clone())),
        ResolvedResource::Time(_) | ResolvedResource::Scripted(_) => Ok(Target::Versioned),
        ResolvedResource::Unavailable => Err(ResourceError::unavailable(typed)),
    }
}

/// `get:` a resource into the artifact named by the step.
pub(crate) async fn get_step<'a>(
    ctx: &'a Ctx<'a>,
    entry: &'a Entry,
    attempt: u32,
    get: &'a GetStep,
    cancel: &CancellationToken,
) -> Done {
    let src = match target(&get.typed) {
        Ok(Target::Git(s)) => s,
        Ok(Target::Versioned) => {
            return super::resource_scripted::get_versioned(ctx, get, entry, attempt, cancel).await;
        }
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let known = match ctx.state.version(entry.seq) {
        Some(v) => Some(v),
        None if get.version.is_some() => {
            match super::version::pick_version(ctx, get, entry).await {
                Ok(v) => Some(v),
                Err(d) => return d,
            }
        }
        None => None,
    };
    let artifact = get.name.value.clone();
    let (ws, mirror) = (
        ctx.artifacts.clone(),
        git::mirror_of(&git_dir(ctx), &src.uri),
    );
    let (seq, name, art) = (entry.seq, entry.name.clone(), artifact.clone());
    let fetched = blocking::<_, ResourceError>(move || {
        let dir = ws
            .prepare(seq, &name, attempt, &[], std::slice::from_ref(&art))
            .map_err(|e| git::GitError::Failed {
                what: "checkout",
                detail: e.to_string(),
            })?;
        let commit = ops::fetch(&src, &mirror, known, &dir.join(&art))?;
        ws.collect(&dir, std::slice::from_ref(&art))
            .map_err(|e| git::GitError::Failed {
                what: "checkout",
                detail: e.to_string(),
            })?;
        ws.discard(&dir);
        Ok((commit, src))
    })
    .await;
    let (commit, src) = match fetched {
        Ok(c) => c,
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let line = format!("fetched {} {} at {commit}", src.uri, src.branch);
    ctx.step_line(entry, line.clone());
    ctx.state.set_version(entry.seq, commit.clone());
    ctx.state.set_git_input(
        artifact,
        GitInput {
            source: src,
            commit,
        },
    );
    super::record::update(ctx, entry.seq, |r| {
        r.produced.stdout_tail = format!("{line}\n")
    })
    .await;
    Done::ok()
}

/// `put:` to a resource: a git resource gets an artifact as a commit on its branch.
pub(crate) async fn put_step<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    entry: &'a Entry,
    put: &'a PutStep,
    cancel: &CancellationToken,
) -> Done {
    let resource = put.typed.name();
    let src = match target(&put.typed) {
        Ok(Target::Git(s)) => s,
        Ok(Target::Versioned) => {
            return super::resource_scripted::put_versioned(ctx, put, step, entry, cancel).await;
        }
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let param = |k: &str| {
        put.params
            .as_ref()
            .and_then(|p| p.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let Some(artifact) =
        param("repository").or_else(|| step.inputs.first().map(|i| i.value.clone()))
    else {
        return Done::fail(
            FailureKind::Configuration,
            format!(
                "put `{}` has nothing to push: give `params: {{ repository: ARTIFACT }}` or an input",
                entry.name
            ),
        );
    };
    let Some(path) = ctx.artifacts.artifact(&artifact) else {
        return Done::fail(
            FailureKind::Outputs,
            format!("input `{artifact}` was not produced by any step that ran"),
        );
    };
    let message =
        param("message").unwrap_or_else(|| format!("treadle run {}: {}", ctx.run, entry.name));
    let mirror = git::mirror_of(&git_dir(ctx), &src.uri);
    let pushed = blocking::<_, ResourceError>(move || {
        let commit = ops::publish(&src, &mirror, &path, &message)?;
        Ok((commit, src))
    })
    .await;
    match pushed {
        Ok((commit, src)) => {
            let version = Version::from([("ref".to_owned(), commit.clone())]);
            if let Err(e) =
                super::resource_scripted::record_put(ctx, entry, resource, version).await
            {
                return Done::fail(FailureKind::Infrastructure, e.to_string());
            }
            let line = format!("pushed {commit} to {} {}", src.uri, src.branch);
            ctx.step_line(entry, line.clone());
            super::record::update(ctx, entry.seq, |r| {
                r.produced.stdout_tail = format!("{line}\n")
            })
            .await;
            Done::ok()
        }
        Err(e) => Done::fail(FailureKind::Infrastructure, e.to_string()),
    }
}

/// After an agent step succeeded: its work on the git artifacts the run manages kept
/// as one commit on the run's branch, or wiped, as `crate::agent::commit`'s rule says.
/// `Some`: the step fails instead (a commit that could not be made; its changes wiped).
pub(crate) async fn keep_work(ctx: &Ctx<'_>, step: &Step, entry: &Entry) -> Option<Done> {
    for work in commit::managed_work(step, |a| ctx.state.git_input(a)) {
        let Keep::Commit(message) = &work.keep else {
            let wiped = wipe_work(ctx, entry, &work.artifact, "no `commit:`");
            match wiped.await {
                Ok(()) => continue,
                Err(e) => return Some(Done::fail(FailureKind::Infrastructure, e.to_string())),
            }
        };
        if let Err(e) = commit_work(ctx, entry, &work, message).await {
            // A step that fails keeps nothing: its changes go too.
            let why = "its commit failed";
            if let Err(wipe) = wipe_work(ctx, entry, &work.artifact, why).await {
                crate::console::tell!("treadle: {wipe}");
            }
            let artifact = &work.artifact;
            return Some(Done::fail(
                FailureKind::Infrastructure,
                format!("cannot commit the agent's work on `{artifact}`: {e}"),
            ));
        }
    }
    None
}

async fn commit_work(
    ctx: &Ctx<'_>,
    entry: &Entry,
    work: &ManagedWork,
    message: &str,
) -> Result<(), ResourceError> {
    let src = &work.base.source;
    let Some(path) = ctx.artifacts.artifact(&work.artifact) else {
        return Ok(());
    };
    let mirror = git::mirror_of(&git_dir(ctx), &src.uri);
    let branch = commit::run_branch(ctx.run);
    let text = commit::commit_text(message, ctx.run, &entry.name);
    let (base, uri, to) = (work.base.commit.clone(), src.uri.clone(), branch.clone());
    let made = blocking::<_, ResourceError>(move || {
        Ok(commit::commit_work(
            &mirror, &uri, &path, &base, &text, &to,
        )?)
    })
    .await?;
    ctx.step_line(
        entry,
        format!(
            "committed {made} to {} {branch}: {}",
            src.uri,
            message.lines().next().unwrap_or_default()
        ),
    );
    let now = GitInput {
        source: src.clone(),
        commit: made.clone(),
    };
    ctx.state.set_git_input(work.artifact.clone(), now);
    ctx.state.set_commit(entry.seq, work.artifact.clone(), made);
    Ok(())
}

/// A replayed agent step's commits brought back on this run's branch (see
/// `commit::restore_commit`), and the artifacts' git state with them; the commits now.
pub(crate) async fn restore_commits(
    ctx: &Ctx<'_>,
    entry: &Entry,
    outcome: &SuccessRecord,
) -> Result<BTreeMap<String, String>, ResourceError> {
    let mut now = BTreeMap::new();
    for (artifact, made) in &outcome.commits {
        let Some(GitInput {
            source: src,
            commit: base,
        }) = ctx.state.git_input(artifact)
        else {
            return Err(ResourceError::Git(git::GitError::Failed {
                what: "replay",
                detail: format!("`{artifact}` holds no git resource in this run"),
            }));
        };
        let mirror = git::mirror_of(&git_dir(ctx), &src.uri);
        let (branch, made_on) = (commit::run_branch(ctx.run), commit::run_branch(outcome.run));
        let (uri, made, to) = (src.uri.clone(), made.clone(), branch.clone());
        let kept = blocking::<_, ResourceError>(move || {
            Ok(commit::restore_commit(
                &mirror, &uri, &made, &base, &made_on, &to,
            )?)
        })
        .await?;
        ctx.step_line(
            entry,
            format!(
                "restored commit {kept} (made in run {}) on {} {branch}",
                outcome.run, src.uri
            ),
        );
        let holds = GitInput {
            source: src,
            commit: kept.clone(),
        };
        ctx.state.set_git_input(artifact.clone(), holds);
        ctx.state
            .set_commit(entry.seq, artifact.clone(), kept.clone());
        now.insert(artifact.clone(), kept);
    }
    Ok(now)
}

async fn wipe_work<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    artifact: &str,
    why: &str,
) -> Result<(), ResourceError> {
    let Some(before) = ctx.state.input_before(entry.seq, artifact) else {
        return Ok(());
    };
    let ws = ctx.artifacts.clone();
    let (seq, name, art) = (
        entry.seq,
        format!("{}-wipe", entry.name),
        artifact.to_owned(),
    );
    blocking::<_, ResourceError>(move || {
        let fail = |e: &dyn std::fmt::Display| {
            ResourceError::Git(git::GitError::Failed {
                what: "wipe",
                detail: e.to_string(),
            })
        };
        let dir = ws.prepare(seq, &name, 0, &[], &[]).map_err(|e| fail(&e))?;
        copy_tree(&before, &dir.join(&art), true).map_err(|e| fail(&e))?;
        ws.collect(&dir, std::slice::from_ref(&art))
            .map_err(|e| fail(&e))?;
        ws.discard(&dir);
        Ok(())
    })
    .await?;
    ctx.step_line(
        entry,
        format!("wiped the agent's changes to `{artifact}` ({why})"),
    );
    Ok(())
}
