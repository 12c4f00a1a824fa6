//! One run's lifecycle for every front end: begun, executed, ended. A YAML job
//! (`run_served`, `adopt_served`), a Rust workflow (`open_run::OpenRun`, whose steps come one
//! at a time) and a worker's one step (`one_leaf`, whose run is its server's) all go
//! through [`Run`]: it owns what a run holds from its begin to its end (its id, journal,
//! transcript, artifacts, view of the cache, how it started, its deadline, and the single
//! owner of its mutable state), and [`Run::ctx`] is the one place the walker's context is
//! built. So a workflow's steps share one run state (vars, picked sources, built agent
//! steps, spend) as a YAML job's do, and get the job's deadline and source picking too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::artifacts::Artifacts;
use super::event_log::EventLog;
use super::exec::{self, Ctx, Done, RemoteSteps};
use super::mode::Mode;
use super::ports::{AgentRunner, Questions};
use super::run_state::{Owner, RunState};
use super::state::{self, RunStatus, StateError, StepRecord, Store};
use super::transcript::{Event, Style, Transcript};
use super::{FailureKind, RunError, RunReport, Served, Status, StepFailure, start};
use crate::cache::{Start, StepCache};
use crate::pipeline::outline::Outline;
use crate::pipeline::vars::Vars;
use crate::pipeline::{Job, Loaded};

/// A run from its begin to its end.
pub(crate) struct Run {
    /// Its id (on a worker: the server's run).
    id: u64,
    store: Arc<Store>,
    transcript: Arc<Transcript>,
    artifacts: Arc<Artifacts>,
    agents: Arc<dyn AgentRunner>,
    /// Its view of the step cache (`None`: every step runs, as on a worker).
    cache: Option<Arc<StepCache>>,
    /// How it started: what it may take from the cache and from the run it resumes.
    mode: Mode,
    /// Its mutable state, one owner for every step of the run.
    state: Owner,
    /// Cancelled on Ctrl-C (or when the server says so).
    cancel: CancellationToken,
    started: Instant,
    /// When the job's `timeout:` passes.
    deadline: Option<Instant>,
    /// An adopted run's records as the stopped process left them.
    left: Option<Arc<Vec<StepRecord>>>,
    seat: Seat,
    span: tracing::Span,
}

/// What a front end adds to a run: who answers its approvals, where its leaf steps run,
/// which versions its gets fetch, and, for a worker's step, its lease, the session it
/// restores and where its questions go.
#[derive(Default)]
pub(crate) struct Seat {
    /// Approvals and questions are answered over `treadle serve`'s API.
    pub answerable: bool,
    /// Leaf steps run on NATS workers.
    pub remote: Option<Arc<dyn RemoteSteps>>,
    /// The version each `get` of a resource fetches, by resource.
    pub versions: BTreeMap<String, String>,
    /// Admits the writes of an agent step's session (a worker's lease).
    pub fence: Option<Arc<dyn treadle_session::WriteFence>>,
    /// The session an agent step restores (a worker took the step over).
    pub resume: Option<treadle_session::event::SessionId>,
    /// Where an agent step's questions for a person go (a worker's server).
    pub questions: Option<Questions>,
}

/// What a run the state file records is begun with.
pub(crate) struct Opening<'a> {
    pub loaded: &'a Loaded,
    pub job: &'a Job,
    pub store: Arc<Store>,
    pub agents: Arc<dyn AgentRunner>,
    pub style: Style,
    pub cancel: CancellationToken,
    pub versions: BTreeMap<String, String>,
    /// It runs in `treadle serve`, which follows it live and answers its approvals.
    pub served: Option<Served>,
}

/// What a worker's step is run with: the server's run, as far as the step needs it.
pub(crate) struct Hosted {
    pub run: u64,
    pub store: Arc<Store>,
    pub transcript: Arc<Transcript>,
    pub artifacts: Arc<Artifacts>,
    pub agents: Arc<dyn AgentRunner>,
    pub cancel: CancellationToken,
    /// The vars the run captured so far.
    pub vars: Vars,
    /// Tokens and micro-dollars the run spent so far.
    pub spent: (u64, u64),
    pub seat: Seat,
}

/// A run begun in the state file, before its transcript starts.
struct Begun {
    id: u64,
    journal: Arc<EventLog>,
    records: Vec<StepRecord>,
    cache: Arc<StepCache>,
    mode: Mode,
    /// It goes on under the id a stopped process left it at: its start is in its
    /// transcript already, and it resumes no other run.
    adopted: bool,
}

impl Run {
    /// Begins a run of `o.job` in the state file, fresh or as `start` says (its plan may
    /// be empty, a workflow's: steps come later); the run, and its event journal.
    pub(crate) async fn begin(
        o: Opening<'_>,
        start: &Start,
    ) -> Result<(Self, Arc<EventLog>), RunError> {
        if let Start::Resume(old) = start {
            super::stop_leftovers_of(&o.store, *old).await?;
        }
        let (cache, mode) = start::open(&o.store, o.loaded, o.job, start).await?;
        let records = super::pending_records(&Outline::of(o.job));
        let pipeline = o.loaded.file.display().to_string();
        // A run's link to the run it resumes (or replays) is written before the run
        // itself, under the state file's lock (so its id is the next one): a process
        // stopped between the two leaves a link the next run of that id overwrites, never
        // a run without its link, which a resume of it needs to find the older records.
        let linked = cache.link.is_some();
        let next = if linked {
            next_run_id(&o.store).await?
        } else {
            0
        };
        if linked {
            link_early(&cache, next).await;
        }
        let (id, journal) = open_in_store(&o.store, &records, &pipeline, &o.job.name.value).await?;
        if linked && id != next {
            link_early(&cache, id).await;
        }
        let begun = Begun {
            id,
            journal,
            records,
            cache,
            mode,
            adopted: false,
        };
        Self::seat(o, begun, start).await
    }

    /// Goes on with run `id`, which a process that stopped left running (`treadle serve`
    /// and `treadle watch` at start-up, holding the state file's lock): the same id, its
    /// transcript continuing, its finished steps kept, a step it left unfinished continued.
    pub(crate) async fn adopt(o: Opening<'_>, id: u64) -> Result<(Self, Arc<EventLog>), RunError> {
        let start = Start::Resume(id);
        // The process that ran it is gone; what its commands left running goes first.
        super::stop_leftovers_of(&o.store, id).await?;
        let (cache, mode) = start::open(&o.store, o.loaded, o.job, &start).await?;
        let pending = super::pending_records(&Outline::of(o.job));
        let (db, kept) = (o.store.database(), o.store.clone());
        let (records, journal) = tokio::task::spawn_blocking(move || {
            let stored = kept.steps(id)?;
            let journal = EventLog::open(db, id)?;
            Ok::<_, StateError>((stored, journal))
        })
        .await
        .map_err(StateError::from)??;
        // The stored records, unless the job's outline changed under them.
        let same = records.len() == pending.len()
            && records
                .iter()
                .zip(&pending)
                .all(|(a, b)| a.seq == b.seq && a.path == b.path);
        let begun = Begun {
            id,
            journal: Arc::new(journal),
            records: if same { records } else { pending },
            cache,
            mode,
            adopted: true,
        };
        Self::seat(o, begun, &start).await
    }

    /// A begun run given its artifacts, link, transcript and seat, its start announced.
    async fn seat(
        o: Opening<'_>,
        begun: Begun,
        start: &Start,
    ) -> Result<(Self, Arc<EventLog>), RunError> {
        let Begun {
            id,
            journal,
            records,
            cache,
            mode,
            adopted,
        } = begun;
        let mut seat = Seat {
            versions: o.versions,
            ..Seat::default()
        };
        if let Some(served) = o.served {
            (served.on_begin)(id, journal.clone());
            seat.answerable = true;
            seat.remote = served.remote;
        }
        let artifacts = Arc::new(Artifacts::create(&start::state_dir(&o.store), id)?);
        if !adopted {
            start::link(&o.store, &cache, start, id).await;
        }
        let (job, pipeline) = (
            o.job.name.value.as_str(),
            o.loaded.file.display().to_string(),
        );
        let span = crate::telemetry::spans::run(id, job, &pipeline);
        let journal_was_empty = journal.is_empty();
        let transcript = Arc::new(
            Transcript::new(o.style, super::redactor(o.loaded)).with_journal(journal.clone()),
        );
        start::announce(
            &transcript,
            id,
            adopted,
            journal_was_empty,
            (job, &pipeline),
        );
        if let (false, Some(text)) = (adopted, mode.resumes()) {
            transcript.emit(&Event::Notice { run: id, text });
        }
        let started = Instant::now();
        let run = Self {
            id,
            store: o.store,
            transcript,
            artifacts,
            agents: o.agents,
            cache: Some(cache),
            mode,
            left: adopted.then(|| Arc::new(records.clone())),
            state: Owner::new(
                RunState {
                    records,
                    ..RunState::default()
                },
                0,
                0,
            ),
            cancel: o.cancel,
            started,
            deadline: o.job.timeout.as_ref().map(|t| started + t.value.0),
            seat,
            span,
        };
        Ok((run, journal))
    }

    /// The server's run `h.run` as a worker runs one step of it: no record of its own, no
    /// cache, the run's vars and spend so far.
    pub(crate) fn hosted(h: Hosted, job: &Job) -> Self {
        let records = super::pending_records(&Outline::of(job));
        Self {
            id: h.run,
            store: h.store,
            transcript: h.transcript,
            artifacts: h.artifacts,
            agents: h.agents,
            cache: None,
            mode: Mode::Fresh,
            state: Owner::new(
                RunState {
                    records,
                    vars: h.vars,
                    ..RunState::default()
                },
                h.spent.0,
                h.spent.1,
            ),
            cancel: h.cancel,
            started: Instant::now(),
            deadline: None,
            left: None,
            seat: h.seat,
            span: tracing::Span::none(),
        }
    }

    /// The walker's context for `job` (a workflow's, as its plan stands now): the only
    /// place one is built.
    pub(crate) fn ctx<'a>(&'a self, loaded: &'a Loaded, job: &'a Job) -> Ctx<'a> {
        Ctx {
            loaded,
            job,
            outline: Outline::of(job),
            store: self.store.clone(),
            transcript: self.transcript.clone(),
            artifacts: self.artifacts.clone(),
            agents: self.agents.clone(),
            run: self.id,
            root: self.cancel.clone(),
            cache: self.cache.clone(),
            mode: &self.mode,
            answerable: self.seat.answerable,
            deadline: self.deadline,
            versions: &self.seat.versions,
            remote: self.seat.remote.clone(),
            fence: self.seat.fence.clone(),
            resume: self.seat.resume,
            questions: self.seat.questions.clone(),
            left: self.left.clone(),
            state: &self.state,
        }
    }

    /// Executes the whole job (a YAML run): its walk, hooks and asserts.
    pub(crate) async fn execute(&self, loaded: &Loaded, job: &Job) -> Done {
        let ctx = self.ctx(loaded, job);
        let job_span = crate::telemetry::spans::job(&self.span, &job.name.value);
        exec::job::job(&ctx).instrument(job_span).await
    }

    /// Executes the last step of `job`'s plan (a workflow's, appended since the previous
    /// call), with every step before it as the work it chains to, under the job's
    /// deadline and on the sources picked for its agents. Returns its outcome and its
    /// outline seq.
    pub(crate) async fn step(&self, loaded: &Loaded, job: &Job) -> (Done, u32) {
        let Some(step) = job.plan.last() else {
            let done = Done::fail(FailureKind::Configuration, "the job has no step to run");
            return (done, 0);
        };
        let ctx = self.ctx(loaded, job);
        if let Some(cache) = &self.cache {
            cache.rechain(crate::cache::chain::Chain::of(job, &ctx.outline));
        }
        let Some(seq) = ctx.outline.entry(step).map(|e| e.seq) else {
            let why = "the step is missing from the outline";
            return (Done::fail(FailureKind::Infrastructure, why), 0);
        };
        self.append_pending(&ctx.outline).await;
        if let Some(done) = exec::walk::past_deadline(&ctx) {
            ctx.skip(std::slice::from_ref(step));
            return (done, seq);
        }
        if let Err(e) = exec::job::pick_sources(&ctx).await {
            ctx.skip(std::slice::from_ref(step));
            return (Done::fail(FailureKind::ModelOutage, e.to_string()), seq);
        }
        let done = ctx.exec(step, self.cancel.clone()).await;
        (done, seq)
    }

    /// The records of the outline's entries the run has none of yet (a step appended to a
    /// workflow's plan, its nested steps and hooks), pending, written as `begin` writes a
    /// YAML run's.
    async fn append_pending(&self, outline: &Outline) {
        let known = self.state.with(|s| s.records.len());
        let fresh: Vec<StepRecord> = super::pending_records(outline)
            .into_iter()
            .skip(known)
            .collect();
        if fresh.is_empty() {
            return;
        }
        let (store, run, pending) = (self.store.clone(), self.id, fresh.clone());
        let written = tokio::task::spawn_blocking(move || {
            pending.iter().try_for_each(|r| store.put_step(run, r))
        })
        .await
        .map_err(StateError::from)
        .and_then(|r| r);
        self.state.with(|s| {
            if let Err(e) = written {
                s.state_error.get_or_insert(e.to_string());
            }
            s.records.extend(fresh);
        });
    }

    /// Ends the run with `done`: errored when the state file could not record a step,
    /// recorded and shown with its last event in one commit, and the steps' directories of
    /// a run that ended well discarded.
    pub(crate) async fn end(self, mut done: Done) -> Result<RunReport, RunError> {
        if let Some(warning) = self.cache.as_ref().and_then(|c| c.finish()) {
            crate::console::tell!("treadle: {warning}");
        }
        if let Some(e) = self.state.with(|s| s.state_error.take())
            && done.status != Status::Aborted
        {
            done = Done::fail(
                FailureKind::Infrastructure,
                format!("cannot record the run: {e}"),
            );
        }
        crate::telemetry::spans::record_status(&self.span, done.status.name());
        let span = self.span.clone();
        let report = end_run(&self.store, &self.transcript, self.id, self.started, done)
            .instrument(span)
            .await;
        if matches!(&report, Ok(r) if r.status == Status::Succeeded) {
            // The agent steps' directories, kept for a process that stops before their
            // records are final; a run that ended well goes on nowhere.
            let artifacts = self.artifacts.clone();
            let _ = tokio::task::spawn_blocking(move || artifacts.discard_steps()).await;
        }
        report
    }

    /// Its id in the state file.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Its artifacts.
    pub(crate) fn artifacts(&self) -> &Artifacts {
        &self.artifacts
    }

    /// Its mutable state.
    pub(crate) fn state(&self) -> &Owner {
        &self.state
    }

    /// From now on its approvals and questions are answered over `treadle serve`'s API.
    pub(crate) fn answered_by_server(&mut self) {
        self.seat.answerable = true;
    }
}

/// Gives a run its id and its event journal in the state file.
async fn open_in_store(
    store: &Arc<Store>,
    records: &[StepRecord],
    pipeline: &str,
    job: &str,
) -> Result<(u64, Arc<EventLog>), RunError> {
    let (store, records, p, j) = (
        store.clone(),
        records.to_vec(),
        pipeline.to_owned(),
        job.to_owned(),
    );
    tokio::task::spawn_blocking(move || {
        let id = store.begin_run(&p, &j, exec::now_ms(), &records)?;
        let journal = EventLog::open(store.database(), id)?;
        Ok((id, Arc::new(journal)))
    })
    .await
    .map_err(StateError::from)?
}

/// The id the state file gives its next run.
async fn next_run_id(store: &Arc<Store>) -> Result<u64, RunError> {
    let store = store.clone();
    let runs = tokio::task::spawn_blocking(move || store.runs())
        .await
        .map_err(StateError::from)??;
    Ok(runs.iter().map(|r| r.id).max().map_or(1, |id| id + 1))
}

/// Links run `run` to the run it resumes; best effort, as `start::link`.
async fn link_early(cache: &Arc<StepCache>, run: u64) {
    let cache = cache.clone();
    let _ = tokio::task::spawn_blocking(move || cache.link_run(run)).await;
}

/// Records how the run ended, shows it, and reports it.
async fn end_run(
    store: &Arc<Store>,
    transcript: &Arc<Transcript>,
    run_id: u64,
    started: Instant,
    done: Done,
) -> Result<RunReport, RunError> {
    let status = RunStatus::from(done.status);
    let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let failure = done.failure.clone().map(|f| StepFailure {
        message: transcript.redactor().mask(&f.message),
        ..f
    });
    let error = failure.as_ref().map(|f| f.message.clone());
    let finished = Event::RunFinished {
        run: run_id,
        status,
        duration_ms: took,
        error: error.clone(),
        failure: done.kind(),
        asserts: done.asserts.clone(),
    };
    // The end and `run_finished` in one durable commit: a restarted server would go on
    // with a run whose end a crash lost, and would leave one ended without its last event.
    let ended = {
        let (transcript, end) = (transcript.clone(), failure.clone());
        tokio::task::spawn_blocking(move || {
            transcript.emit_ending(&finished, move |txn| {
                state::end_run_in(txn, run_id, status, took, end, None)
            })
        })
        .await
        .map_err(StateError::from)
        .and_then(|r| r)
    };
    let recorded = match ended {
        Ok(true) => Ok(()),
        // No run journal here, or its commit failed (a full disk): the store records the
        // end alone, and its error says why it cannot (the journal's is redb's own text).
        Ok(false) | Err(_) => {
            let (store, failure) = (store.clone(), failure.clone());
            tokio::task::spawn_blocking(move || store.end_run(run_id, status, took, failure))
                .await
                .map_err(StateError::from)
                .and_then(|r| r)
        }
    };
    if let Err(source) = recorded {
        // The disk is full, or redb refuses writes after an I/O error: the end goes to the
        // lock file's reserved bytes, for the next open to record.
        let (store, failure) = (store.clone(), failure.clone());
        let noted = tokio::task::spawn_blocking(move || {
            store.note_end(run_id, status, took, failure).is_ok()
        })
        .await
        .unwrap_or(false);
        return Err(RunError::EndNotRecorded {
            run: run_id,
            status: status.as_str(),
            source,
            noted,
        });
    }
    Ok(RunReport {
        run: run_id,
        status: done.status,
        error,
        failure: done.kind(),
    })
}
