//! Running `get:` and `put:` on the built-in git resource, and committing or wiping an
//! agent's work on a git input.
//!
//! An agent step changes a git input only when the input is also one of its outputs (the
//! run's artifacts give it a writable copy). After it succeeds, with `commit: MESSAGE`
//! that tree is committed on top of the fetched commit and pushed to the resource's
//! branch, and later steps see it; without `commit:` the artifact goes back to what was
//! fetched — every edit, new file and deletion is dropped — and only the step's other
//! outputs survive. Inputs carry no `.git`, so an agent cannot make commits of its own.

use std::path::PathBuf;
use std::sync::Arc;

use super::artifacts::copy_tree;
use super::exec::{Ctx, Done};
use super::transcript::Event;
use crate::blocking::blocking;
use crate::cache::StepCache;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
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

    /// After an agent step succeeded: commit its work on git inputs, or wipe it.
    pub(crate) async fn git_work(
        &self,
        cache: &Arc<StepCache>,
        step: &At<Step>,
        entry: &Entry,
    ) -> Result<(), ResourceError> {
        if step.agent_name().is_none() {
            return Ok(());
        }
        let outputs: Vec<&str> = step.outputs.iter().map(|o| o.value.as_str()).collect();
        let touched: Vec<(String, String, String)> = step
            .inputs
            .iter()
            .filter(|i| outputs.contains(&i.value.as_str()))
            .filter_map(|i| {
                cache
                    .git_input(&i.value)
                    .map(|(res, commit)| (i.value.clone(), res, commit))
            })
            .collect();
        for (artifact, resource, commit) in touched {
            match step
                .commit
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
            {
                Some(message) => {
                    self.commit_work(cache, entry, &artifact, &resource, &commit, message)
                        .await?;
                }
                None => self.wipe_work(cache, entry, &artifact).await?,
            }
        }
        Ok(())
    }

    async fn commit_work(
        &self,
        cache: &Arc<StepCache>,
        entry: &Entry,
        artifact: &str,
        resource: &str,
        parent: &str,
        message: &str,
    ) -> Result<(), ResourceError> {
        let src = self.git_source(resource)?;
        let Some(path) = self.artifacts.artifact(artifact) else {
            return Ok(());
        };
        let mirror = git::mirror_of(&self.git_dir(), &src.uri);
        let (parent, message) = (parent.to_owned(), message.to_owned());
        let (commit, src) = blocking::<_, ResourceError>(move || {
            let commit = ops::commit_on(&src, &mirror, &path, Some(&parent), &message)?;
            Ok((commit, src))
        })
        .await?;
        self.say(
            entry,
            format!("committed {commit} to {} {}", src.uri, src.branch),
        );
        cache.set_git_input(artifact.to_owned(), resource.to_owned(), commit);
        Ok(())
    }

    async fn wipe_work(
        &self,
        cache: &Arc<StepCache>,
        entry: &Entry,
        artifact: &str,
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
            format!("wiped the agent's changes to `{artifact}` (no `commit:`)"),
        );
        Ok(())
    }
}
