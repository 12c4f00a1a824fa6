//! One typed step run within a run that is already open: the executor's entry for a front
//! end whose plan is not known in advance (a Rust workflow, `crate::workflow`). The run is
//! begun and ended as `run_from` begins and ends one; each step is appended to the run's
//! job, given its outline seq and chain link by the same functions YAML uses
//! (`Outline::of`, `Chain::of`), and walked by the same `Ctx::exec`, so it has the same
//! key, the same record in the state file and the same transcript as a YAML step.
//!
//! The run's state that the executor's `Owner` holds (records, spend, the first state-file
//! error) is carried from one step's `Ctx` to the next; state that only YAML constructs read
//! (`across:` cells, `load_var:` vars, the execution log) starts empty for each step.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::exec::{Ctx, Done};
use super::run_state::{Owner, RunState};
use super::state::{StateError, StepRecord, Store};
use super::transcript::{Event, Style, Transcript};
use super::{AgentRunner, RunError, RunReport, artifacts, start};
use crate::cache::chain::Chain;
use crate::cache::{Start, StepCache};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded};
use crate::run::failure::FailureKind;

/// A run begun in the state file, whose steps are handed to it one at a time.
pub struct OpenRun {
    run: u64,
    store: Arc<Store>,
    transcript: Arc<Transcript>,
    artifacts: Arc<artifacts::Artifacts>,
    agents: Arc<dyn AgentRunner>,
    cache: Arc<StepCache>,
    records: Vec<StepRecord>,
    tokens: u64,
    micro_usd: u64,
    state_error: Option<String>,
    cancel: CancellationToken,
    started: Instant,
    /// Its event journal (what `treadle serve` follows it by).
    journal: Arc<super::event_log::EventLog>,
    /// Approvals and questions are answered over the server's API (`Ctx::answerable`).
    answerable: bool,
}

impl OpenRun {
    /// Begins a run of `job` (its plan may be empty: steps come later) in `store`, fresh
    /// or resuming run `RUN` (`Start::Resume`); other starts need a plan known in advance.
    pub async fn begin(
        loaded: &Loaded,
        job: &Job,
        store: Arc<Store>,
        agents: Arc<dyn AgentRunner>,
        start: &Start,
        style: Style,
        cancel: CancellationToken,
    ) -> Result<Self, RunError> {
        if let Start::Resume(old) = start {
            super::stop_leftovers_of(&store, *old).await?;
        }
        let cache = start::open(&store, loaded, job, start).await?;
        let pipeline = loaded.file.display().to_string();
        // A resumed run's link to the run it resumes is written before the run itself,
        // under the state file's lock (so its id is the next one): a process stopped
        // between the two leaves a link the next run of that id overwrites, never a run
        // without its link, which a resume of it would need to find the older records.
        let next = next_run_id(&store).await?;
        link_early(&cache, next).await;
        let (run, journal) = super::begin(&store, &[], &pipeline, &job.name.value).await?;
        if run != next {
            link_early(&cache, run).await;
        }
        let state_dir = start::state_dir(&store);
        let artifacts = Arc::new(artifacts::Artifacts::create(&state_dir, run)?);
        start::link(&store, &cache, start, run).await;
        let transcript =
            Arc::new(Transcript::new(style, super::redactor(loaded)).with_journal(journal.clone()));
        transcript.emit(&Event::RunStarted {
            run,
            job: job.name.value.clone(),
            pipeline,
        });
        if let Some(why) = crate::confine::unavailable() {
            transcript.emit(&Event::Notice {
                run,
                text: format!("tasks run unconfined: {why}"),
            });
        }
        Ok(Self {
            run,
            store,
            transcript,
            artifacts,
            agents,
            cache,
            records: Vec::new(),
            tokens: 0,
            micro_usd: 0,
            state_error: None,
            cancel,
            started: Instant::now(),
            journal,
            answerable: false,
        })
    }

    /// Its event journal, which `treadle serve`'s followers subscribe to.
    pub fn journal(&self) -> Arc<super::event_log::EventLog> {
        self.journal.clone()
    }

    /// Its approvals and questions are answered over `treadle serve`'s API, as a served
    /// YAML run's are.
    pub fn answered_by_server(&mut self) {
        self.answerable = true;
    }

    /// The run's id in the state file.
    pub fn id(&self) -> u64 {
        self.run
    }

    /// The record of the step at outline `seq`, as it stands.
    pub fn record(&self, seq: u32) -> Option<&StepRecord> {
        self.records.get(seq as usize)
    }

    /// Where artifact `name` is now (the last step that made it).
    pub fn artifact(&self, name: &str) -> Option<PathBuf> {
        self.artifacts.artifact(name)
    }

    /// Runs the last step of `job`'s plan (appended since the previous call), through the
    /// walker, with every step before it as the work it chains to. Returns its outcome and
    /// its outline seq.
    pub async fn step(&mut self, loaded: &Loaded, job: &Job) -> (Done, u32) {
        let Some(step) = job.plan.last() else {
            return (
                Done::fail(FailureKind::Configuration, "the job has no step to run"),
                0,
            );
        };
        let outline = Outline::of(job);
        self.cache.rechain(Chain::of(job, &outline));
        let Some(seq) = outline.entry(step).map(|e| e.seq) else {
            return (
                Done::fail(
                    FailureKind::Infrastructure,
                    "the step is missing from the outline",
                ),
                0,
            );
        };
        // The new step's entries (itself, its nested steps and hooks) follow every earlier
        // one: records are appended, and written pending as `begin_run` writes a YAML run's.
        let fresh: Vec<StepRecord> = super::pending_records(&outline)
            .into_iter()
            .skip(self.records.len())
            .collect();
        let (store, run, pending) = (self.store.clone(), self.run, fresh.clone());
        let written = tokio::task::spawn_blocking(move || {
            pending.iter().try_for_each(|r| store.put_step(run, r))
        })
        .await
        .map_err(StateError::from)
        .and_then(|r| r);
        if let Err(e) = written {
            self.state_error.get_or_insert(e.to_string());
        }
        self.records.extend(fresh);
        let ctx = self.ctx(loaded, job, outline);
        let done = ctx.exec(step, self.cancel.clone()).await;
        self.keep(ctx);
        (done, seq)
    }

    /// The walker's context for one step, carrying the run's state.
    fn ctx<'a>(&mut self, loaded: &'a Loaded, job: &'a Job, outline: Outline) -> Ctx<'a> {
        Ctx {
            loaded,
            job,
            outline,
            store: self.store.clone(),
            transcript: self.transcript.clone(),
            artifacts: self.artifacts.clone(),
            agents: self.agents.clone(),
            run: self.run,
            root: self.cancel.clone(),
            left: None,
            state: Owner::new(
                RunState {
                    records: std::mem::take(&mut self.records),
                    state_error: self.state_error.take(),
                    ..Default::default()
                },
                self.tokens,
                self.micro_usd,
            ),
            cache: Some(self.cache.clone()),
            answerable: self.answerable,
            deadline: None,
            versions: Default::default(),
            remote: None,
            fence: None,
            resume: None,
            questions: None,
        }
    }

    /// Takes the run's state back from a step's context.
    fn keep(&mut self, ctx: Ctx<'_>) {
        let (records, state_error) = ctx
            .state
            .with(|s| (std::mem::take(&mut s.records), s.state_error.take()));
        self.records = records;
        self.state_error = state_error;
        self.tokens = ctx.state.tokens();
        self.micro_usd = ctx.state.micro_usd();
    }

    /// Ends the run with `done` (the front end's outcome), recorded and shown as a YAML
    /// run's end is.
    pub async fn end(self, done: Done) -> Result<RunReport, RunError> {
        if let Some(warning) = self.cache.finish() {
            crate::console::tell!("treadle: {warning}");
        }
        let done = match self.state_error {
            Some(e) if done.status != super::Status::Aborted => Done::fail(
                FailureKind::Infrastructure,
                format!("cannot record the run: {e}"),
            ),
            _ => done,
        };
        let ok = done.is_ok();
        let report =
            super::end_run(&self.store, &self.transcript, self.run, self.started, done).await;
        if ok {
            let artifacts = self.artifacts.clone();
            let _ = tokio::task::spawn_blocking(move || artifacts.discard_steps()).await;
        }
        report
    }
}

/// The id the state file gives its next run.
async fn next_run_id(store: &Arc<Store>) -> Result<u64, RunError> {
    let store = store.clone();
    let runs = tokio::task::spawn_blocking(move || store.runs())
        .await
        .map_err(StateError::from)??;
    Ok(runs.iter().map(|r| r.id).max().map_or(1, |id| id + 1))
}

/// Links run `run` to the run it resumes (nothing for a fresh run); best effort, as
/// `start::link`.
async fn link_early(cache: &Arc<StepCache>, run: u64) {
    let cache = cache.clone();
    let _ = tokio::task::spawn_blocking(move || cache.link_run(run)).await;
}
