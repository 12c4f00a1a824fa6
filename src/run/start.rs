//! Opening the cache for a run: which job a resumed or replayed run is of, checking that
//! the earlier run exists, the run's mode, and linking the new run to it; and the run's
//! start announced.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::mode::Mode;
use super::state::{RunStatus, StateError, Store};
use super::transcript::{Event, Transcript};
use crate::blocking::blocking;
use crate::cache::chain::Chain;
use crate::cache::records::Records;
use crate::cache::{Start, StartError, StepCache};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded};

fn earlier(start: &Start) -> Option<u64> {
    match start {
        Start::Fresh | Start::Force | Start::Rerun(_) => None,
        Start::Resume(of) | Start::Replay(of, _) => Some(*of),
        Start::Fork(fork) => Some(fork.of),
    }
}

/// The job of the run being resumed or replayed (`None` for a fresh run).
pub async fn earlier_job(store: &Arc<Store>, start: &Start) -> Result<Option<String>, StartError> {
    let Some(of) = earlier(start) else {
        return Ok(None);
    };
    let store = store.clone();
    blocking(move || match store.run(of) {
        Ok(r) => Ok(Some(r.job)),
        Err(StateError::NoRun(n)) => Err(StartError::NoRun(n)),
        Err(e) => Err(StartError::Earlier(Box::new(e))),
    })
    .await
}

/// The directory of the state file, where `cas/` and `git/` live.
pub fn state_dir(store: &Store) -> PathBuf {
    store
        .path()
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Opens the cache for a run of `job`, and the mode the run starts in as `start` asks.
pub(crate) async fn open(
    store: &Arc<Store>,
    loaded: &Loaded,
    job: &Job,
    start: &Start,
) -> Result<(Arc<StepCache>, Mode), StartError> {
    let outline = Outline::of(job);
    let chain = Chain::of(job, &outline);
    let max = loaded
        .pipeline
        .cache
        .as_ref()
        .map_or(crate::cache::DEFAULT_MAX_SIZE, |c| c.max_bytes());
    let (store, start, name) = (store.clone(), start.clone(), job.name.value.clone());
    blocking(move || {
        let records = Records::open(store.database())?;
        let exists = |id: u64| store.run(id).is_ok();
        let opened = Mode::open(&start, &records, (&name, &outline, &chain), &exists)?;
        let cache = StepCache::open(
            records,
            &state_dir(&store),
            &name,
            chain,
            (opened.link, opened.fork),
            max,
        );
        Ok((Arc::new(cache), opened.mode))
    })
    .await
}

/// Links the new run to the one it resumes or replays; a resumed run that a killed
/// process left `running` is closed as aborted, with the approvals it left waiting.
pub async fn link(store: &Arc<Store>, cache: &Arc<StepCache>, start: &Start, run: u64) {
    let (store, cache, start) = (store.clone(), cache.clone(), start.clone());
    let _ = tokio::task::spawn_blocking(move || {
        // Best effort: the link is informational; the run goes on without it.
        let _ = cache.link_run(run);
        if let Start::Resume(of) = start
            && let Ok(old) = store.run(of)
            && old.status == RunStatus::Running
        {
            let took = crate::clock::now_ms().saturating_sub(old.started_ms);
            let _ = store.end_run(
                of,
                RunStatus::Aborted,
                took,
                Some(super::StepFailure::new(
                    super::FailureKind::Interrupted,
                    format!("interrupted; resumed as run {run}"),
                )),
            );
            if let Err(e) = super::approval::close_abandoned(&store, of) {
                crate::console::tell!("treadle: cannot close run {of}'s waiting approvals: {e}");
            }
        }
    })
    .await;
}

/// Says that run `run` starts (job and pipeline: `names`), or that this process goes on
/// with a run whose process stopped (`adopted`), and that tasks run unconfined when they
/// cannot be confined.
pub(crate) fn announce(
    transcript: &Transcript,
    run: u64,
    adopted: bool,
    journal_was_empty: bool,
    (job, pipeline): (&str, &str),
) {
    let started = Event::RunStarted {
        run,
        job: job.to_owned(),
        pipeline: pipeline.to_owned(),
    };
    if adopted && journal_was_empty {
        // The process stopped before its run's start reached the disk: it is said again,
        // as the journal's first event (a follower saw it with this seq, if at all).
        transcript.emit(&started);
    }
    if adopted {
        transcript.emit(&Event::Notice {
            run,
            text: format!(
                "the process running this run stopped; process {} goes on with it from its last committed step",
                std::process::id()
            ),
        });
    } else {
        transcript.emit(&started);
    }
    if let Some(why) = crate::confine::unavailable() {
        // Said once per run, not per step: the commands still run, only unconfined.
        transcript.emit(&Event::Notice {
            run,
            text: format!("tasks run unconfined: {why}"),
        });
    }
}
