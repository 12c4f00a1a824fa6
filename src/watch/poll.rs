//! The poller: checks every trigger resource (on the interval, and at once for a webhook
//! delivery), then queues each job whose inputs moved.
//!
//! A check's version lives only in memory until a job is queued with it: queueing and
//! recording the job's new inputs are one transaction (`store::enqueue`), so a crash before
//! it loses nothing (the next start checks again and queues then) and a crash after it
//! finds the row queued. A check that fails leaves the resource's last version as it was;
//! the next poll checks it again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Watcher;
use super::check;
use super::store::{self, Versions};
use super::watched::{self, Waiting};
use crate::console::tell;
use crate::pipeline::Version;

/// Checks run at once in one poll round.
const CHECKS_AT_ONCE: usize = 8;

/// A request to check one resource now (a webhook delivery).
#[derive(Debug, Clone)]
pub struct CheckNow {
    /// The pipeline's index in the watcher.
    pub pipeline: usize,
    /// The resource.
    pub resource: String,
}

/// One resource checked in a round: (pipeline index, resource, its newest version as a
/// build is pinned to, or why the check failed).
type Checked = (usize, String, Result<Option<String>, CheckFailed>);

/// Why a resource's check failed in a round.
#[derive(Debug, thiserror::Error)]
enum CheckFailed {
    /// The check failed.
    #[error("{0}")]
    Check(#[from] crate::resource::check::CheckError),
    /// Recording the pipeline's checks failed: one error for each of its resources.
    #[error("{0}")]
    Recording(Arc<crate::resource::check::CheckError>),
    /// The check's task ended without an answer.
    #[error("its task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// What one poll round did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Round {
    /// Checks that gave a version.
    pub checked: usize,
    /// Checks that failed (retried next round).
    pub failed: usize,
    /// Jobs queued.
    pub queued: usize,
}

impl Watcher {
    /// Polls until `stop`: a full round at once and every `interval`, and a check of one
    /// resource whenever a webhook asks.
    pub async fn poll(self: Arc<Self>, interval: Duration, stop: CancellationToken) {
        let mut hooks = self.hook_rx.lock().ok().and_then(|mut r| r.take());
        let mut next = tokio::time::Instant::now();
        loop {
            let hook = async {
                match hooks.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {
                    // A shutdown does not wait for a slow check (its command is killed).
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = self.clone().round(None) => {}
                    }
                    next = tokio::time::Instant::now() + interval;
                }
                Some(now) = hook => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = self.clone().round(Some(now)) => {}
                    }
                }
            }
        }
    }

    /// One round: check every trigger resource (or only `only`), then queue what moved.
    pub async fn round(self: Arc<Self>, only: Option<CheckNow>) -> Round {
        let mut targets = Vec::new();
        for (i, w) in self.pipelines.iter().enumerate() {
            for r in w.trigger_resources() {
                let wanted = only
                    .as_ref()
                    .is_none_or(|o| o.pipeline == i && o.resource == r);
                if wanted {
                    targets.push((i, r));
                }
            }
        }
        let mut round = Round::default();
        for (i, resource, got) in self.check_all(targets).await {
            match got {
                Ok(version) => {
                    round.checked += 1;
                    if let (Some(v), Ok(mut latest)) = (version, self.latest.lock()) {
                        latest.insert((i, resource), v);
                    }
                }
                Err(e) => {
                    round.failed += 1;
                    tell!(
                        "treadle watch: check of `{resource}` failed: {e} (checked again at the next poll)"
                    );
                }
            }
        }
        let me = self.clone();
        let queued = tokio::task::spawn_blocking(move || me.schedule())
            .await
            .unwrap_or(0);
        round.queued = queued;
        if queued > 0 {
            self.wake.notify_one();
        }
        round
    }

    /// Checks each of `targets` (pipeline index, resource), [`CHECKS_AT_ONCE`] at a time,
    /// each check a task of its own so that they spread over the runtime's threads; then
    /// records what each pipeline's checks found in one transaction. Each resource's
    /// newest version as a build is pinned to, or why its check failed.
    async fn check_all(self: &Arc<Self>, targets: Vec<(usize, String)>) -> Vec<Checked> {
        // A JoinSet aborts its tasks (and so kills their commands) when dropped: a round
        // dropped at a shutdown leaves no check running.
        let mut running = tokio::task::JoinSet::new();
        let mut found = Vec::with_capacity(targets.len());
        let mut targets = targets.into_iter();
        let mut ids = std::collections::HashMap::new();
        loop {
            while running.len() < CHECKS_AT_ONCE
                && let Some((i, resource)) = targets.next()
            {
                let me = self.clone();
                let name = resource.clone();
                let task = running.spawn(async move {
                    me.checkers[i].find(&name, &CancellationToken::new()).await
                });
                ids.insert(task.id(), (i, resource));
            }
            let Some(done) = running.join_next_with_id().await else {
                break;
            };
            let (id, got) = match done {
                Ok((id, got)) => (id, got.map_err(CheckFailed::from)),
                Err(e) => (e.id(), Err(CheckFailed::from(e))),
            };
            if let Some((i, resource)) = ids.remove(&id) {
                found.push((i, resource, got));
            }
        }
        let mut out = Vec::with_capacity(found.len());
        let mut by_pipeline: BTreeMap<usize, Vec<(String, Vec<Version>)>> = BTreeMap::new();
        for (i, resource, got) in found {
            match got {
                Ok(versions) => by_pipeline.entry(i).or_default().push((resource, versions)),
                Err(e) => out.push((i, resource, Err(e))),
            }
        }
        for (i, found) in by_pipeline {
            let names: Vec<String> = found.iter().map(|(r, _)| r.clone()).collect();
            match check::record(&self.checkers[i], &self.pipelines[i].loaded, found).await {
                Ok(each) => out.extend(
                    each.into_iter()
                        .map(|(r, got)| (i, r, got.map_err(CheckFailed::from))),
                ),
                Err(e) => {
                    let e = Arc::new(e);
                    out.extend(
                        names
                            .into_iter()
                            .map(|r| (i, r, Err(CheckFailed::Recording(e.clone())))),
                    );
                }
            }
        }
        out
    }

    /// Queues each job whose trigger inputs moved since it was last queued; how many.
    /// Blocking (it writes the state file).
    pub(super) fn schedule(&self) -> usize {
        self.take_resume_requests();
        let db = self.store.database();
        let standings = store::standings(&db).unwrap_or_default();
        let mut due: Vec<store::Enqueue> = Vec::new();
        for (i, w) in self.pipelines.iter().enumerate() {
            let latest: BTreeMap<String, String> = self
                .latest
                .lock()
                .map(|l| {
                    l.iter()
                        .filter(|((p, _), _)| *p == i)
                        .map(|((_, r), v)| (r.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for job in &w.jobs {
                let key = (w.name.clone(), job.name.clone());
                if standings.get(&key).is_some_and(|s| s.paused) {
                    continue;
                }
                let green = |u: &str| store::green_builds(&db, &w.name, u).unwrap_or_default();
                let now = match watched::inputs(job, &latest, &green) {
                    Ok(v) => v,
                    Err(why) => {
                        self.say_waiting(&key, &why);
                        continue;
                    }
                };
                match store::scheduled(&db, &w.name, &job.name) {
                    Ok(last) if watched::triggered(job, &now, last.as_ref()) => {
                        due.push((w.name.clone(), job.name.clone(), now));
                    }
                    Ok(_) => {}
                    Err(e) => tell!("treadle watch: cannot read `{}`'s inputs: {e}", job.name),
                }
            }
        }
        let queued = match store::enqueue(&db, &due) {
            Ok(ids) => {
                for (id, (_, job, versions)) in ids.iter().zip(&due) {
                    tell!(
                        "treadle watch: queued `{job}` (#{id}) with {}",
                        show_versions(versions)
                    );
                }
                ids.len()
            }
            Err(e) => {
                tell!("treadle watch: cannot queue builds (they are queued at the next poll): {e}");
                0
            }
        };
        self.write_jobs();
        queued
    }

    /// Says once (until it changes) why a job waits.
    fn say_waiting(&self, key: &(String, String), why: &Waiting) {
        let text = why.to_string();
        let Ok(mut said) = self.waiting.lock() else {
            return;
        };
        if said.get(key) != Some(&text) {
            tell!("treadle watch: `{}` waiting: {text}", key.1);
            said.insert(key.clone(), text);
        }
    }
}

/// `repo 1a2b3c4d, tools 9f8e7d6c`: versions shortened for a line of output.
pub fn show_versions(v: &Versions) -> String {
    if v.is_empty() {
        return "no pinned inputs".to_owned();
    }
    v.iter()
        .map(|(r, v)| format!("{r} {}", v.chars().take(12).collect::<String>()))
        .collect::<Vec<_>>()
        .join(", ")
}
