//! Talking to a running watcher through files beside the state file, since it holds the
//! state file itself: `treadle jobs resume` leaves a request in `watch/resume/` that the
//! watcher carries out at its next poll, and the watcher keeps `watch/jobs.json`, the
//! standing of every job, for `treadle jobs` to show, and `watch/runs.json`, its newest
//! runs with their steps, for `treadle runs` (and `--steps`, `--cost`).
//!
//! Decision: redb locks the state file for the process that opened it and refuses even a
//! read-only open beside it, and the watcher keeps it open for its whole life; so the
//! watcher writes what `treadle runs` shows, at every poll and after every build, rather
//! than giving the file up between polls (a build may run for hours) or serving an API
//! (which `treadle serve` is for).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Watcher;
use super::store;
use crate::console::tell;
use crate::run::state::{RunRecord, StepRecord};

/// One job's line in `treadle jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLine {
    /// The pipeline's name.
    pub pipeline: String,
    /// The job.
    pub job: String,
    /// Paused by `max_consecutive_failures:`.
    pub paused: bool,
    /// Failed builds in a row.
    pub failures: u32,
    /// Builds queued or running.
    pub queued: usize,
}

/// What `watch/runs.json` holds: the watcher's newest runs, each with its steps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunsSnapshot {
    /// When it was written (ms since the Unix epoch).
    pub written_ms: u64,
    /// The runs, oldest first, with their steps.
    pub runs: Vec<(RunRecord, Vec<StepRecord>)>,
}

/// How many of the newest runs `watch/runs.json` keeps.
const SNAPSHOT_RUNS: usize = 500;

/// A request to resume a paused job.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ResumeRequest {
    pipeline: String,
    job: String,
}

/// Errors of the control files.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A file cannot be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The watcher has written no list of jobs.
    #[error("{0}: no list of jobs from the watcher yet")]
    NoList(PathBuf),
}

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("watch")
}

/// Asks the watcher on `state_dir` to resume `job` of `pipeline` at its next poll.
pub fn request_resume(
    state_dir: &Path,
    pipeline: &str,
    job: &str,
) -> Result<PathBuf, ControlError> {
    let d = dir(state_dir).join("resume");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ControlError::Io { path, source }
    };
    std::fs::create_dir_all(&d).map_err(io(&d))?;
    let req = ResumeRequest {
        pipeline: pipeline.to_owned(),
        job: job.to_owned(),
    };
    let name = format!("{}-{}.json", crate::clock::now_ms(), std::process::id());
    let path = d.join(name);
    let text = serde_json::to_vec(&req).unwrap_or_default();
    std::fs::write(&path, text).map_err(io(&path))?;
    Ok(path)
}

/// The list of jobs the watcher on `state_dir` last wrote.
pub fn read_jobs(state_dir: &Path) -> Result<Vec<JobLine>, ControlError> {
    let path = dir(state_dir).join("jobs.json");
    let text = std::fs::read(&path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ControlError::NoList(path.clone()),
        _ => ControlError::Io {
            path: path.clone(),
            source,
        },
    })?;
    serde_json::from_slice(&text).map_err(|e| ControlError::Io {
        path,
        source: std::io::Error::other(e),
    })
}

/// The runs the watcher on `state_dir` last wrote.
pub fn read_runs(state_dir: &Path) -> Result<RunsSnapshot, ControlError> {
    let path = dir(state_dir).join("runs.json");
    let text = std::fs::read(&path).map_err(|source| ControlError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|e| ControlError::Io {
        path,
        source: std::io::Error::other(e),
    })
}

/// Writes `text` as `name` in `d`, whole (a temporary file renamed into place). Best effort:
/// these are views, rewritten at every poll.
fn write_view(d: &Path, name: &str, text: &[u8]) {
    let tmp = d.join(format!("{name}.tmp"));
    let _ = std::fs::create_dir_all(d)
        .and_then(|()| std::fs::write(&tmp, text))
        .and_then(|()| std::fs::rename(&tmp, d.join(name)));
}

/// The standing of every job of `pipelines` in the state file.
pub fn job_lines(
    db: &redb::Database,
    pipelines: &[(String, Vec<String>)],
) -> Result<Vec<JobLine>, crate::run::StateError> {
    let standings = store::standings(db)?;
    let queue = store::queue(db)?;
    let mut out = Vec::new();
    for (pipeline, jobs) in pipelines {
        for job in jobs {
            let s = standings
                .get(&(pipeline.clone(), job.clone()))
                .cloned()
                .unwrap_or_default();
            out.push(JobLine {
                pipeline: pipeline.clone(),
                job: job.clone(),
                paused: s.paused,
                failures: s.failures,
                queued: queue
                    .iter()
                    .filter(|q| &q.pipeline == pipeline && &q.job == job)
                    .count(),
            });
        }
    }
    Ok(out)
}

impl Watcher {
    fn state_dir(&self) -> PathBuf {
        crate::run::start::state_dir(&self.store)
    }

    /// Carries out the resume requests left since the last poll. Blocking.
    pub(super) fn take_resume_requests(&self) {
        let d = dir(&self.state_dir()).join("resume");
        let Ok(entries) = std::fs::read_dir(&d) else {
            return;
        };
        let db = self.store.database();
        for entry in entries.flatten() {
            let path = entry.path();
            let req = std::fs::read(&path)
                .ok()
                .and_then(|t| serde_json::from_slice::<ResumeRequest>(&t).ok());
            // Best effort: a request that cannot be removed is carried out again, harmlessly.
            let _ = std::fs::remove_file(&path);
            let Some(req) = req else { continue };
            match store::resume_job(&db, &req.pipeline, &req.job) {
                Ok(true) => tell!("treadle watch: `{}` resumed", req.job),
                Ok(false) => tell!("treadle watch: `{}` was not paused", req.job),
                Err(e) => tell!("treadle watch: cannot resume `{}`: {e}", req.job),
            }
        }
    }

    /// Writes `watch/jobs.json`, the standing of every watched job. Blocking.
    pub(super) fn write_jobs(&self) {
        let names: Vec<(String, Vec<String>)> = self
            .pipelines
            .iter()
            .map(|w| {
                let jobs = w
                    .loaded
                    .pipeline
                    .jobs
                    .iter()
                    .map(|j| j.name.value.clone())
                    .collect();
                (w.name.clone(), jobs)
            })
            .collect();
        let Ok(lines) = job_lines(&self.store.database(), &names) else {
            return;
        };
        let text = serde_json::to_vec_pretty(&lines).unwrap_or_default();
        write_view(&dir(&self.state_dir()), "jobs.json", &text);
        self.write_runs();
    }

    /// Writes `watch/runs.json`, the newest runs with their steps. Blocking.
    fn write_runs(&self) {
        let Ok(all) = self.store.runs() else {
            return;
        };
        let newest = all.len().saturating_sub(SNAPSHOT_RUNS);
        let runs = all[newest..]
            .iter()
            .map(|r| (r.clone(), self.store.steps(r.id).unwrap_or_default()))
            .collect();
        let snapshot = RunsSnapshot {
            written_ms: crate::clock::now_ms(),
            runs,
        };
        let text = serde_json::to_vec(&snapshot).unwrap_or_default();
        write_view(&dir(&self.state_dir()), "runs.json", &text);
    }
}
