//! The workers: claim queued builds within the limits (`--max-concurrent`, a job's
//! `max_in_flight:`, `serial:`, `serial_groups:`) and run each with the executor
//! `treadle run` uses, pinned to the versions it was queued with.
//!
//! A row is claimed and its run id written before the run's first step, so a process that
//! dies mid-build leaves a row that the next start resumes (`--resume` of that run: what
//! succeeded is not run again). A build stopped by a shutdown leaves its row too; any
//! other end removes it in the same transaction that records the build.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Watcher;
use super::poll::show_versions;
use super::store::{self, BuildCount, Queued};
use super::watched::WatchedJob;
use crate::cache::Start;
use crate::console::tell;
use crate::resource::history::History;
use crate::resource::version_text;
use crate::run::{RunOptions, RunStatus, Served, Status};

/// The builds running now, for the limits.
#[derive(Debug, Default)]
pub struct InFlight {
    /// All builds.
    total: usize,
    /// Builds by (pipeline, job).
    per_job: HashMap<(String, String), u32>,
    /// Serial groups held, by (pipeline, group), with the job holding each.
    groups: HashMap<(String, String), String>,
}

impl InFlight {
    /// Why `job` may not start now (`None`: it may).
    fn refuse(&self, pipeline: &str, job: &WatchedJob, max_total: usize) -> Option<String> {
        if self.total >= max_total {
            return Some(format!("{max_total} builds running (--max-concurrent)"));
        }
        let running = self
            .per_job
            .get(&(pipeline.to_owned(), job.name.clone()))
            .copied()
            .unwrap_or(0);
        if job.max_in_flight.is_some_and(|m| running >= m) {
            return Some(format!("{running} build(s) of it running"));
        }
        job.serial_groups.iter().find_map(|g| {
            self.groups
                .get(&(pipeline.to_owned(), g.clone()))
                .map(|holder| format!("serial group `{g}` held by `{holder}`"))
        })
    }

    fn take(&mut self, pipeline: &str, job: &WatchedJob) {
        self.total += 1;
        *self
            .per_job
            .entry((pipeline.to_owned(), job.name.clone()))
            .or_default() += 1;
        for g in &job.serial_groups {
            self.groups
                .insert((pipeline.to_owned(), g.clone()), job.name.clone());
        }
    }

    fn give_back(&mut self, pipeline: &str, job: &WatchedJob) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self
            .per_job
            .get_mut(&(pipeline.to_owned(), job.name.clone()))
        {
            *n = n.saturating_sub(1);
        }
        for g in &job.serial_groups {
            self.groups.remove(&(pipeline.to_owned(), g.clone()));
        }
    }
}

/// What a worker needs to stop: `stop` ends claiming and cancels interruptible builds;
/// `force` cancels every build.
#[derive(Debug, Clone)]
pub struct Stops {
    /// The first signal.
    pub stop: CancellationToken,
    /// The second signal, or the end of the wait for non-interruptible builds.
    pub force: CancellationToken,
}

impl Watcher {
    /// Claims and runs queued builds until `stops.stop`, then waits for the running ones.
    pub async fn work(self: Arc<Self>, stops: Stops) {
        let mut builds = JoinSet::new();
        loop {
            while !stops.stop.is_cancelled() {
                let me = self.clone();
                let claimed = tokio::task::spawn_blocking(move || me.claim())
                    .await
                    .ok()
                    .flatten();
                let Some((row, pipeline)) = claimed else {
                    break;
                };
                builds.spawn(self.clone().build(row, pipeline, stops.clone()));
            }
            // Reap what ended, so the set does not grow for the watcher's lifetime.
            while builds.try_join_next().is_some() {}
            tokio::select! {
                () = stops.stop.cancelled() => break,
                () = self.wake.notified() => {}
                // A paused job resumed, or a limit freed by a build of another process.
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
        while builds.join_next().await.is_some() {}
    }

    /// The oldest row no worker has whose job may start now, marked claimed.
    fn claim(&self) -> Option<(Queued, usize)> {
        let db = self.store.database();
        let rows = store::queue(&db).ok()?;
        let standings = store::standings(&db).unwrap_or_default();
        let mut in_flight = self.in_flight.lock().ok()?;
        for mut row in rows.into_iter().filter(|r| !r.claimed) {
            let Some((i, w)) = self
                .pipelines
                .iter()
                .enumerate()
                .find(|(_, w)| w.name == row.pipeline)
            else {
                continue;
            };
            // A row of a job the file no longer has waits for the file to have it again.
            let Some(job) = w.job(&row.job) else {
                continue;
            };
            let key = (row.pipeline.clone(), row.job.clone());
            if standings.get(&key).is_some_and(|s| s.paused) {
                continue;
            }
            if let Some(why) = in_flight.refuse(&w.name, job, self.max_concurrent) {
                self.say_blocked(row.id, &row.job, &why);
                continue;
            }
            row.claimed = true;
            if let Err(e) = store::put(&db, &row) {
                tell!("treadle watch: cannot claim build #{}: {e}", row.id);
                return None;
            }
            in_flight.take(&w.name, job);
            return Some((row, i));
        }
        None
    }

    fn say_blocked(&self, id: u64, job: &str, why: &str) {
        let key = (format!("#{id}"), job.to_owned());
        let text = format!("blocked: {why}");
        let Ok(mut said) = self.waiting.lock() else {
            return;
        };
        if said.get(&key) != Some(&text) {
            tell!("treadle watch: `{job}` (#{id}) {text}");
            said.insert(key, text);
        }
    }

    /// Runs one claimed build to its end and records it.
    async fn build(self: Arc<Self>, row: Queued, pipeline: usize, stops: Stops) {
        let w = self.pipelines[pipeline].clone();
        let Some(job) = w.job(&row.job).cloned() else {
            return;
        };
        let cancel = if job.interruptible {
            stops.stop.child_token()
        } else {
            stops.force.child_token()
        };
        let ended = self.run_row(&row, &w.loaded, cancel, &stops).await;
        if let Some((run, outcome)) = ended {
            self.finish(&row, &job, run, outcome).await;
        }
        if let Ok(mut f) = self.in_flight.lock() {
            f.give_back(&w.name, &job);
        }
        let me = self.clone();
        // A green build may release a job gated on it with `passed:`.
        let _ = tokio::task::spawn_blocking(move || me.schedule()).await;
        self.wake.notify_one();
    }

    /// Runs the row's build (fresh, or resuming the run it began as); how it ended, or
    /// `None` when a shutdown stopped it (the row stays for the next start).
    async fn run_row(
        &self,
        row: &Queued,
        loaded: &crate::pipeline::Loaded,
        cancel: CancellationToken,
        stops: &Stops,
    ) -> Option<(u64, BuildCount)> {
        let start = match row.run {
            None => Start::Fresh,
            Some(run) => match self.earlier(run).await {
                // It ended before the process that ran it could record so.
                Some(RunStatus::Succeeded) => return Some((run, BuildCount::Green)),
                Some(RunStatus::Failed | RunStatus::Errored) => {
                    return Some((run, BuildCount::Red));
                }
                Some(RunStatus::Running | RunStatus::Aborted) => Start::Resume(run),
                None => Start::Fresh,
            },
        };
        tell!(
            "treadle watch: building `{}` (#{}) with {}{}",
            row.job,
            row.id,
            show_versions(&row.versions),
            match &start {
                Start::Resume(r) => format!(", resuming run {r}"),
                _ => String::new(),
            }
        );
        let options = RunOptions {
            job: Some(row.job.clone()),
            style: self.style,
            state: None,
            cancel: cancel.clone(),
            versions: row.versions.clone(),
        };
        let on_begin = {
            let (db, observer, mut begun) =
                (self.store.database(), self.observer.clone(), row.clone());
            Box::new(move |id: u64, journal| {
                begun.run = Some(id);
                // Before the first step: a crash from here on resumes this run.
                if let Err(e) = store::put(&db, &begun) {
                    tell!(
                        "treadle watch: cannot record that build #{} is run {id}: {e}",
                        begun.id
                    );
                }
                observer.begun(id, journal, cancel);
            })
        };
        let served = Some(Served {
            on_begin,
            remote: None,
        });
        let report = crate::run::run_served(
            loaded,
            options,
            self.store.clone(),
            self.agents.clone(),
            &start,
            served,
        )
        .await;
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                tell!(
                    "treadle watch: build #{} of `{}` could not run: {e}",
                    row.id,
                    row.job
                );
                return Some((row.run.unwrap_or(0), BuildCount::Red));
            }
        };
        self.observer.ended(report.run);
        let outcome = match report.status {
            Status::Succeeded => BuildCount::Green,
            Status::Failed | Status::Errored => BuildCount::Red,
            Status::Aborted if stops.stop.is_cancelled() => {
                tell!(
                    "treadle watch: `{}` run {} interrupted; the next start resumes it",
                    row.job,
                    report.run
                );
                return None;
            }
            Status::Aborted => BuildCount::Cancelled,
        };
        Some((report.run, outcome))
    }

    /// The versions run `run`'s puts published, written as a get fetches them.
    async fn published(&self, row: &Queued, run: u64) -> store::Versions {
        let Some(w) = self.pipelines.iter().find(|w| w.name == row.pipeline) else {
            return store::Versions::new();
        };
        let db = self.store.database();
        let puts = tokio::task::spawn_blocking(move || History::open(db)?.puts_of(run)).await;
        let puts = match puts {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tell!("treadle watch: cannot read what run {run} published: {e}");
                return store::Versions::new();
            }
            Err(_) => return store::Versions::new(),
        };
        puts.into_iter()
            .map(|p| {
                let text = version_text(&w.loaded, &p.resource, &p.version);
                (p.resource, text)
            })
            .collect()
    }

    async fn earlier(&self, run: u64) -> Option<RunStatus> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.run(run).ok().map(|r| r.status))
            .await
            .ok()
            .flatten()
    }

    /// Records the build's end, counts a failure, pauses the job at its ceiling.
    async fn finish(&self, row: &Queued, job: &WatchedJob, run: u64, outcome: BuildCount) {
        let published = self.published(row, run).await;
        let (db, row2, max) = (self.store.database(), row.clone(), job.max_failures);
        let standing = tokio::task::spawn_blocking(move || {
            store::finish(&db, &row2, run, outcome, max, &published)
        })
        .await;
        let standing = match standing {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tell!("treadle watch: cannot record build #{}: {e}", row.id);
                return;
            }
            Err(_) => return,
        };
        let word = match outcome {
            BuildCount::Green => "succeeded".to_owned(),
            BuildCount::Red => match job.max_failures {
                Some(m) => format!("failed ({}/{m} in a row)", standing.failures),
                None => "failed".to_owned(),
            },
            BuildCount::Cancelled => "was cancelled".to_owned(),
        };
        tell!("treadle watch: `{}` run {run} {word}", row.job);
        if outcome == BuildCount::Red && standing.paused {
            tell!(
                "treadle watch: `{}` PAUSED after {} failures in a row; resume it with `treadle jobs resume {}`",
                row.job,
                standing.failures,
                row.job
            );
            tracing::warn!(target: "trigger.job_paused", job = %row.job, failures = standing.failures, "job paused");
        }
    }
}
