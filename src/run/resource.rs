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
use std::sync::Arc;

use super::artifacts::copy_tree;
use super::exec::{Ctx, Done};
use super::transcript::Event;
use crate::agent::commit::{self, Keep, ManagedWork};
use crate::blocking::blocking;
use crate::cache::StepCache;
use crate::cache::records::SuccessRecord;
use crate::pipeline::Step;
use crate::pipeline::outline::Entry;
use crate::pipeline::{Version, VersionSpec};
use crate::resource::check::Checker;
use crate::resource::{GitSource, Kind, ResourceError, git, ops};
use tokio_util::sync::CancellationToken;

impl<'a> Ctx<'a> {
    fn git_source(&self, resource: &str) -> Result<GitSource, ResourceError> {
        ops::source(self.loaded, resource)
    }

    fn git_dir(&self) -> PathBuf {
        self.cache
            .as_ref()
            .map_or_else(|| self.artifacts.root().join("git"), |c| c.git_dir.clone())
    }

    /// The version a `get` of `resource` fetches (a git commit, or a version as canonical
    /// JSON); remembered for the step.
    pub(crate) async fn resolve_version(
        &self,
        cache: &Arc<StepCache>,
        step: &Step,
        resource: &str,
        entry: &Entry,
    ) -> Result<String, Done> {
        let version = match self.versions.get(resource) {
            // A triggered build fetches the version it was queued with, not the latest.
            Some(pinned) => pinned.clone(),
            None => self.pick_version(step, entry, resource).await?,
        };
        cache.set_version(entry.seq, version.clone());
        Ok(version)
    }

    /// Works out the version a `get` fetches under its `version:`: a git resource's
    /// latest commit asks the remote; everything else checks the resource, records what
    /// it reported in the version history and takes the version from there.
    pub(crate) async fn pick_version(
        &self,
        step: &Step,
        entry: &Entry,
        resource: &str,
    ) -> Result<String, Done> {
        let mode = step.version().map(|v| v.value.clone()).unwrap_or_default();
        // An `every` get of an input set: the set decided its version.
        if mode == VersionSpec::Every
            && let Some(v) = self.every_version(entry.seq)
        {
            return Ok(v);
        }
        let kind = Kind::of(self.loaded, resource).map_err(|e| Done::errored(e.to_string()))?;
        if let (Kind::Git(src), VersionSpec::Latest) = (&kind, &mode) {
            let src = src.clone();
            return blocking::<_, ResourceError>(move || ops::latest(&src))
                .await
                .map_err(|e| Done::errored(e.to_string()));
        }
        let checker = Checker::new(
            self.loaded,
            self.store.database(),
            self.artifacts.root().join("checks"),
        )
        .map_err(|e| Done::errored(e.to_string()))?;
        checker
            .check_without_cursor(resource, &self.root)
            .await
            .map_err(|e| Done::errored(e.to_string()))?;
        let job = &self.job.name.value;
        // `latest` in a run is what the check reported, not what this run's puts published.
        let picked = match mode {
            VersionSpec::Latest => checker
                .history()
                .latest_in_run(resource, self.run)
                .map_err(|e| e.to_string()),
            _ => checker
                .next_version(job, resource, &mode)
                .map_err(|e| e.to_string()),
        }
        .map_err(Done::errored)?;
        let Some(version) = picked else {
            return Err(Done::failed(match mode {
                VersionSpec::Every => format!(
                    "get `{resource}`: no new versions; every version its check reported was already taken by job `{job}`"
                ),
                _ => format!("get `{resource}`: no versions available (its check reported none)"),
            }));
        };
        Ok(self.version_text(resource, &version))
    }

    /// How a get step holds a version: a git resource's commit, else canonical JSON.
    pub(crate) fn version_text(&self, resource: &str, version: &Version) -> String {
        crate::resource::version_text(self.loaded, resource, version)
    }

    fn say(&self, entry: &Entry, line: String) {
        self.emit(Event::Output {
            run: self.run,
            seq: entry.seq,
            stream: "stdout".into(),
            line,
        });
    }

    /// `get:` a resource into the artifact named by the step.
    pub(crate) async fn get_step(
        &'a self,
        step: &'a Step,
        entry: &'a Entry,
        attempt: u32,
        resource: &'a str,
        cancel: &CancellationToken,
    ) -> Done {
        let src = match Kind::of(self.loaded, resource) {
            Ok(Kind::Git(s)) => s,
            Ok(other) => {
                return self
                    .get_versioned(other, step, entry, attempt, resource, cancel)
                    .await;
            }
            Err(e) => return Done::errored(e.to_string()),
        };
        let known = match self.cache.as_ref().and_then(|c| c.version(entry.seq)) {
            Some(v) => Some(v),
            None if step.version().is_some() => {
                match self.pick_version(step, entry, resource).await {
                    Ok(v) => Some(v),
                    Err(d) => return d,
                }
            }
            None => None,
        };
        let artifact = step
            .got()
            .map_or_else(|| resource.to_owned(), |g| g.value.clone());
        let (ws, mirror) = (
            self.artifacts.clone(),
            git::mirror_of(&self.git_dir(), &src.uri),
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
            Err(e) => return Done::errored(e.to_string()),
        };
        let line = format!("fetched {} {} at {commit}", src.uri, src.branch);
        self.say(entry, line.clone());
        if let Some(c) = &self.cache {
            c.set_version(entry.seq, commit.clone());
            c.set_git_input(artifact, resource.to_owned(), commit.clone());
        }
        self.update(entry.seq, |r| r.stdout_tail = format!("{line}\n"))
            .await;
        Done::ok()
    }

    /// `put:` to a resource: a git resource gets an artifact as a commit on its branch.
    pub(crate) async fn put_step(
        &'a self,
        step: &'a Step,
        entry: &'a Entry,
        resource: &'a str,
        cancel: &CancellationToken,
    ) -> Done {
        let src = match Kind::of(self.loaded, resource) {
            Ok(Kind::Git(s)) => s,
            Ok(other) => {
                return self
                    .put_versioned(other, step, entry, resource, cancel)
                    .await;
            }
            Err(e) => return Done::errored(e.to_string()),
        };
        let param = |k: &str| {
            step.params()
                .and_then(|p| p.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let Some(artifact) =
            param("repository").or_else(|| step.inputs.first().map(|i| i.value.clone()))
        else {
            return Done::errored(format!(
                "put `{}` has nothing to push: give `params: {{ repository: ARTIFACT }}` or an input",
                entry.name
            ));
        };
        let Some(path) = self.artifacts.artifact(&artifact) else {
            return Done::failed(format!(
                "input `{artifact}` was not produced by any step that ran"
            ));
        };
        let message =
            param("message").unwrap_or_else(|| format!("treadle run {}: {}", self.run, entry.name));
        let mirror = git::mirror_of(&self.git_dir(), &src.uri);
        let pushed = blocking::<_, ResourceError>(move || {
            let commit = ops::publish(&src, &mirror, &path, &message)?;
            Ok((commit, src))
        })
        .await;
        match pushed {
            Ok((commit, src)) => {
                let version = Version::from([("ref".to_owned(), commit.clone())]);
                if let Err(e) = self.record_put(entry, resource, version).await {
                    return Done::errored(e);
                }
                let line = format!("pushed {commit} to {} {}", src.uri, src.branch);
                self.say(entry, line.clone());
                self.update(entry.seq, |r| r.stdout_tail = format!("{line}\n"))
                    .await;
                Done::ok()
            }
            Err(e) => Done::errored(e.to_string()),
        }
    }

    /// After an agent step succeeded: its work on the git artifacts the run manages kept
    /// as one commit on the run's branch, or wiped, as `crate::agent::commit`'s rule says.
    /// `Some`: the step fails instead (a commit that could not be made; its changes wiped).
    pub(crate) async fn keep_work(&self, step: &Step, entry: &Entry) -> Option<Done> {
        let cache = self.cache.clone()?;
        for work in commit::managed_work(step, |a| cache.git_input(a)) {
            let Keep::Commit(message) = &work.keep else {
                let wiped = self.wipe_work(&cache, entry, &work.artifact, "no `commit:`");
                match wiped.await {
                    Ok(()) => continue,
                    Err(e) => return Some(Done::errored(e.to_string())),
                }
            };
            if let Err(e) = self.commit_work(&cache, entry, &work, message).await {
                // A step that fails keeps nothing: its changes go too.
                let why = "its commit failed";
                if let Err(wipe) = self.wipe_work(&cache, entry, &work.artifact, why).await {
                    crate::console::tell!("treadle: {wipe}");
                }
                let artifact = &work.artifact;
                return Some(Done::errored(format!(
                    "cannot commit the agent's work on `{artifact}`: {e}"
                )));
            }
        }
        None
    }

    async fn commit_work(
        &self,
        cache: &Arc<StepCache>,
        entry: &Entry,
        work: &ManagedWork,
        message: &str,
    ) -> Result<(), ResourceError> {
        let src = self.git_source(&work.resource)?;
        let Some(path) = self.artifacts.artifact(&work.artifact) else {
            return Ok(());
        };
        let mirror = git::mirror_of(&self.git_dir(), &src.uri);
        let branch = commit::run_branch(self.run);
        let text = commit::commit_text(message, self.run, &entry.name);
        let (base, uri, to) = (work.base.clone(), src.uri.clone(), branch.clone());
        let made = blocking::<_, ResourceError>(move || {
            Ok(commit::commit_work(
                &mirror, &uri, &path, &base, &text, &to,
            )?)
        })
        .await?;
        self.say(
            entry,
            format!(
                "committed {made} to {} {branch}: {}",
                src.uri,
                message.lines().next().unwrap_or_default()
            ),
        );
        cache.set_git_input(work.artifact.clone(), work.resource.clone(), made.clone());
        cache.set_commit(entry.seq, work.artifact.clone(), made);
        Ok(())
    }

    /// A replayed agent step's commits brought back on this run's branch (see
    /// `commit::restore_commit`), and the artifacts' git state with them; the commits now.
    pub(crate) async fn restore_commits(
        &self,
        cache: &Arc<StepCache>,
        entry: &Entry,
        outcome: &SuccessRecord,
    ) -> Result<BTreeMap<String, String>, ResourceError> {
        let mut now = BTreeMap::new();
        for (artifact, made) in &outcome.commits {
            let Some((resource, base)) = cache.git_input(artifact) else {
                return Err(ResourceError::Git(git::GitError::Failed {
                    what: "replay",
                    detail: format!("`{artifact}` holds no git resource in this run"),
                }));
            };
            let src = self.git_source(&resource)?;
            let mirror = git::mirror_of(&self.git_dir(), &src.uri);
            let (branch, made_on) = (
                commit::run_branch(self.run),
                commit::run_branch(outcome.run),
            );
            let (uri, made, to) = (src.uri.clone(), made.clone(), branch.clone());
            let kept = blocking::<_, ResourceError>(move || {
                Ok(commit::restore_commit(
                    &mirror, &uri, &made, &base, &made_on, &to,
                )?)
            })
            .await?;
            self.say(
                entry,
                format!(
                    "restored commit {kept} (made in run {}) on {} {branch}",
                    outcome.run, src.uri
                ),
            );
            cache.set_git_input(artifact.clone(), resource, kept.clone());
            cache.set_commit(entry.seq, artifact.clone(), kept.clone());
            now.insert(artifact.clone(), kept);
        }
        Ok(now)
    }

    async fn wipe_work(
        &self,
        cache: &Arc<StepCache>,
        entry: &Entry,
        artifact: &str,
        why: &str,
    ) -> Result<(), ResourceError> {
        let Some(before) = cache.input_before(entry.seq, artifact) else {
            return Ok(());
        };
        let ws = self.artifacts.clone();
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
        self.say(
            entry,
            format!("wiped the agent's changes to `{artifact}` ({why})"),
        );
        Ok(())
    }
}
