//! The walker: runs one step with its guard, attempts, timeout and hooks, and the
//! containers (`do`, `in_parallel`, `try`), recording every transition in the state file
//! and the transcript. The job's own walk (routes, job hooks, job asserts) is `job.rs`;
//! `race` and `across` are `flow.rs`, `ensemble` is `ensemble.rs`.
//!
//! Semantics follow Concourse and `steps`:
//! * `attempts: N` re-runs a failed step (in a fresh directory) up to N times in all;
//!   `timeout` applies to each attempt, and an attempt that used it up is not retried;
//! * a step ends succeeded, failed (it said no, or its timeout passed), errored (it could
//!   not be run) or aborted (the run was interrupted). Exactly one of `on_success`,
//!   `on_failure`, `on_error`, `on_abort` fires, then `ensure`. A failing `on_success` or
//!   `ensure` fails the step; the others are only shown. Hooks after an abort run under a
//!   grace period of their own;
//! * `do` stops at the first failure, and the steps after it are skipped;
//! * `in_parallel` runs its steps together (at most `limit` at once) and fails if any
//!   fails; with `fail_fast` the first failure interrupts the others;
//! * `try` succeeds whatever its step does, except an abort; the real outcome stays
//!   visible to routes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::artifacts::Artifacts;
use super::cell::{CellAt, Given};
pub(crate) use super::hooks::Hooks;
use super::ports::AgentRunner;
pub(crate) use super::run_state::Logged;
use super::run_state::Owner;
use super::state::{StepRecord, StepStatus, Store};
use super::transcript::{Event, Transcript};
use super::work::Work;
use crate::assert::AssertFailure;
use crate::cache::StepCache;
use crate::cache::digest::Digest;
use crate::cache::records::SuccessRecord;
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::{Entry, Outline};
use crate::pipeline::{At, InParallel, Job, Kind, Loaded, Step, StepKind};

/// How a step (or a whole job) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It worked.
    Succeeded,
    /// It failed (exit code 1).
    Failed,
    /// It could not be run (exit code 2).
    Errored,
    /// The run was interrupted (exit code 130).
    Aborted,
}

impl Status {
    /// The status as one lower-case word (`succeeded`, `failed`, `errored`, `aborted`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Errored => "errored",
            Status::Aborted => "aborted",
        }
    }
}

/// The result of running one step.
#[derive(Debug, Clone)]
pub struct Done {
    /// How it ended.
    pub status: Status,
    /// Why, when not well.
    pub error: Option<String>,
    /// Where a verdict sends the plan next.
    pub route: Option<String>,
    /// The asserts that failed, typed (the transcript's JSON lines carry them as they are).
    pub asserts: Vec<AssertFailure>,
    /// The real outcome of the step a `try:` tolerated.
    pub masked: Option<Status>,
}

impl Done {
    pub(crate) fn ok() -> Self {
        Self {
            status: Status::Succeeded,
            error: None,
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn failed(error: impl Into<String>) -> Self {
        Self {
            status: Status::Failed,
            error: Some(error.into()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn errored(error: impl Into<String>) -> Self {
        Self {
            status: Status::Errored,
            error: Some(error.into()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    pub(crate) fn aborted() -> Self {
        Self {
            status: Status::Aborted,
            error: Some("interrupted".to_owned()),
            route: None,
            asserts: Vec::new(),
            masked: None,
        }
    }
    /// A step or job whose asserts failed (`what`: `assert` or `job assert`).
    pub(crate) fn asserts_failed(what: &str, failures: Vec<AssertFailure>) -> Self {
        let joined: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Self {
            asserts: failures,
            ..Self::failed(format!("{what} failed: {}", joined.join("; ")))
        }
    }
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Succeeded
    }
}

/// Runs task and agent steps somewhere other than this process, and shares the step cache
/// with the other processes that do: the NATS dispatcher of `treadle serve --nats`
/// implements it. The trait lives here, where the walker calls it, so that `run` does not
/// depend on `dist`, which is built on `run`.
#[async_trait::async_trait]
pub(crate) trait RemoteSteps: Send + Sync {
    /// Runs one attempt of `step` elsewhere: the walker's replacement for `Ctx::leaf`.
    async fn leaf(
        &self,
        ctx: &Ctx<'_>,
        step: &At<Step>,
        entry: &Entry,
        attempt: u32,
        cancel: CancellationToken,
    ) -> Done;

    /// The record of `key` another process shared, its trees fetched (through `scratch`)
    /// into `cache`'s object store; `None` when nobody shared it.
    async fn shared_hit(
        &self,
        cache: &Arc<StepCache>,
        key: &Digest,
        scratch: PathBuf,
    ) -> Option<SuccessRecord>;

    /// Shares a step's record and its output trees (`dirs`, by output name) with the
    /// other processes.
    async fn share(&self, outcome: &SuccessRecord, dirs: Vec<(String, PathBuf)>);
}

/// What a run shares: its immutable context (shared by `&` for the whole run) and the
/// single owner of its mutable state. What one step is given by its block travels as an
/// argument ([`Given`]), not here.
pub(crate) struct Ctx<'a> {
    pub loaded: &'a Loaded,
    pub job: &'a Job,
    pub outline: Outline,
    pub store: std::sync::Arc<Store>,
    pub transcript: std::sync::Arc<Transcript>,
    pub artifacts: std::sync::Arc<Artifacts>,
    pub agents: std::sync::Arc<dyn AgentRunner>,
    pub run: u64,
    /// Cancelled by Ctrl-C.
    pub root: CancellationToken,
    /// The step cache (`None`: every step runs).
    pub cache: Option<std::sync::Arc<crate::cache::StepCache>>,
    /// Someone can answer approvals while the run waits even though its stdin is not a
    /// terminal (`treadle serve` runs it).
    pub answerable: bool,
    /// When the job's `timeout:` passes: no step or cell starts after it.
    pub deadline: Option<Instant>,
    /// The version each `get` of a resource fetches, by resource (a triggered build's
    /// inputs); others fetch their latest.
    pub versions: std::collections::BTreeMap<String, String>,
    /// Runs leaf steps on workers over NATS (`treadle serve --nats`); `None`: here.
    pub remote: Option<std::sync::Arc<dyn RemoteSteps>>,
    /// Admits the writes of agent steps' sessions (a worker's lease on the step); `None`:
    /// this process owns them.
    pub fence: Option<std::sync::Arc<dyn treadle_session::WriteFence>>,
    /// The session an agent step restores instead of starting one (a worker took the step
    /// over); `None`: a fresh session.
    pub resume: Option<treadle_session::event::SessionId>,
    /// Where agent steps' questions for a person go instead of this process's mailbox (a
    /// worker's go to its server).
    pub questions: Option<super::ports::Questions>,
    /// A run going on under its own id (adopted): its steps' records as its stopped
    /// process left them, which say what that process left unfinished (`continued`); the
    /// records themselves change as this process runs the steps.
    pub left: Option<std::sync::Arc<Vec<StepRecord>>>,
    /// The run's mutable state (records, log, vars, ...) and its budget counters.
    pub state: Owner,
}

pub(crate) use crate::clock::now_ms;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<'a> Ctx<'a> {
    /// Changes a step's record and writes it (`update_at` for a leaf that may be a cell).
    pub(crate) async fn update(&self, seq: u32, change: impl FnOnce(&mut StepRecord)) {
        self.update_in(seq, None, change).await;
    }

    /// Writes to the state file off the async threads. A failure does not stop the step
    /// (what it does matters more than its record), but the first one is kept and makes
    /// the run exit 2 at its end.
    pub(crate) async fn write_state<E: std::fmt::Display>(
        &self,
        write: impl FnOnce(&Store) -> Result<(), E> + Send + 'static,
    ) {
        let store = self.store.clone();
        let result = tokio::task::spawn_blocking(move || write(&store).map_err(|e| e.to_string()));
        let error = match result.await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(e) => e.to_string(),
        };
        self.keep_state_error(error);
    }

    /// Keeps the first failure to write the state file.
    pub(crate) fn keep_state_error(&self, error: String) {
        self.state.with(|s| {
            s.state_error.get_or_insert(error);
        });
    }

    pub(crate) fn emit(&self, event: Event) {
        self.transcript.emit(&event);
    }

    /// The status a cancelled step ends with: aborted on Ctrl-C, else interrupted by a
    /// sibling (`fail_fast`) or a timeout the caller reports.
    pub(crate) fn cancelled(&self) -> Done {
        if self.root.is_cancelled() {
            Done::aborted()
        } else {
            Done::failed("interrupted")
        }
    }

    pub(crate) fn skip(&self, steps: &[At<Step>]) {
        for s in steps {
            if let Some(e) = self.outline.entry(s) {
                self.emit(Event::StepSkipped {
                    run: self.run,
                    seq: e.seq,
                    name: e.name.clone(),
                    depth: e.depth,
                });
            }
        }
    }

    /// Runs one step with its guard, attempts, timeout and hooks.
    pub(crate) fn exec(
        &'a self,
        step: &'a At<Step>,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Done> {
        self.exec_given(step, cancel, Given::default())
    }

    /// [`Self::exec`] with what the block running the step gives it.
    pub(crate) fn exec_given(
        &'a self,
        step: &'a At<Step>,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> BoxFuture<'a, Done> {
        // The step's span covers its attempts and hooks, and ends with its outcome.
        let span = crate::telemetry::spans::step(step, self.outline.entry(step));
        let traced = span.clone();
        self.exec_in(step, cancel, given)
            .map(move |done| {
                crate::telemetry::spans::record_status(&traced, done.status.name());
                done
            })
            .instrument(span)
            .boxed()
    }

    /// [`Self::exec`], for the step itself or for one cell of its `across:`.
    pub(crate) fn exec_in(
        &'a self,
        step: &'a At<Step>,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> BoxFuture<'a, Done> {
        async move {
            let Some(outlined) = self.outline.entry(step) else {
                return Done::errored(format!(
                    "step `{}` is missing from the outline",
                    step.display_name()
                ));
            };
            if step.across.is_some() && given.cell.is_none() {
                return self.across(step, outlined, &cancel).await;
            }
            let entry = &match given.cell {
                Some(c) => c.entry(outlined),
                None => outlined.clone(),
            };
            if let Some(when) = &step.when {
                match self.guard(step, entry, &when.value, &cancel).await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.skip(std::slice::from_ref(step));
                        return Done::ok();
                    }
                    Err(done) => return self.hooks(step, done, &cancel).await,
                }
            }
            let started = Instant::now();
            // A replayed step (or cell) has been shown and recorded; only its hooks remain.
            let before = self.cache_before(step, entry, given.cell).await;
            if let Some(d) = before.as_ref().filter(|d| d.is_ok()) {
                self.log_leaf(step, entry);
                return self.hooks(step, d.clone(), &cancel).await;
            }
            self.update(entry.seq, |r| {
                r.status = StepStatus::Running;
                r.started_ms = Some(now_ms());
                r.error = None;
            })
            .await;
            let mut done = self
                .attempts(step, entry, before.as_ref(), &cancel, given)
                .await;
            // An agent's work on the run's git repositories is committed or wiped before the
            // step counts as succeeded (the rule: `crate::agent::commit`).
            if done.is_ok()
                && let Some(failed) = self.keep_work(step, entry).await
            {
                done = failed;
            }
            self.finished(entry, &done, started.elapsed());
            // The outcome is stored (durably) before the step is marked succeeded: a run
            // killed between the two is resumed from the stored outcome, so a step its
            // record calls succeeded never runs again.
            if done.is_ok() {
                self.cache_after(step, entry).await;
            }
            self.record_end(entry, &done, started).await;
            // A step its group cancelled (a lost race, a fail_fast sibling) did not run to
            // its end, so it is not in the execution log.
            if done.is_ok() || !cancel.is_cancelled() {
                self.log_leaf(step, entry);
            }
            self.hooks(step, done, &cancel).await
        }
        .boxed()
    }

    /// Runs a step's attempts until one succeeds, is aborted or times out, or none is left;
    /// `before` is the cache's answer when the step's key could not be worked out.
    async fn attempts(
        &'a self,
        step: &'a At<Step>,
        entry: &Entry,
        before: Option<&Done>,
        cancel: &CancellationToken,
        given: Given<'a>,
    ) -> Done {
        // An agent step's `attempts:` bounds its requests to the provider (the session's
        // retry policy, see `agent::session_builder`), not how often the step runs.
        let attempts = match &step.kind {
            StepKind::Agent(_) => 1,
            _ => step.attempts.as_ref().map_or(1, |a| a.value.max(1)),
        };
        let mut done = Done::aborted();
        for attempt in 1..=attempts {
            if let Some(d) = before {
                // Its key could not be worked out (e.g. an unreachable resource).
                done = d.clone();
                break;
            }
            if cancel.is_cancelled() {
                done = self.cancelled();
                break;
            }
            self.emit(Event::StepStarted {
                run: self.run,
                seq: entry.seq,
                name: entry.name.clone(),
                kind: entry.kind,
                depth: entry.depth,
                attempt,
            });
            self.update(entry.seq, |r| r.attempts = attempt).await;
            let t0 = Instant::now();
            let timed_out;
            (done, timed_out) = self.attempt(step, entry, attempt, cancel, given).await;
            // The same work against the same deadline would time out again.
            if done.is_ok() || done.status == Status::Aborted || timed_out || attempt == attempts {
                break;
            }
            self.finished(entry, &done, t0.elapsed());
        }
        done
    }

    /// Records how a step ended in its record.
    async fn record_end(&self, entry: &Entry, done: &Done, started: Instant) {
        let error = done.error.clone();
        let succeeded = done.is_ok();
        self.update(entry.seq, move |r| {
            r.status = if succeeded {
                StepStatus::Succeeded
            } else {
                StepStatus::Failed
            };
            r.duration_ms = Some(millis(started.elapsed()));
            r.error = error;
        })
        .await;
    }

    /// Adds a leaf step that ran to the execution log (containers record nothing).
    pub(crate) fn log_leaf(&self, step: &Step, entry: &Entry) {
        if !Kind::of(step).is_leaf() {
            return;
        }
        // A get is logged under the resource it fetched (`resource:` renames only its
        // artifact), as `steps` records it.
        let name = match &step.kind {
            StepKind::Get { resource, .. } => resource.value.clone(),
            _ => entry.name.clone(),
        };
        self.log_as(entry, name);
    }

    /// Adds `name` to the execution log at `entry` (a cell under its step's path and its
    /// index).
    pub(crate) fn log_as(&self, entry: &Entry, name: String) {
        let path = match CellAt::of(entry) {
            Some(at) => self
                .outline
                .entries
                .get(at.seq as usize)
                .map_or_else(|| entry.path.clone(), |e| e.path.clone()),
            None => entry.path.clone(),
        };
        let cell = entry.cell;
        self.state.with(|s| s.log.push(Logged { path, cell, name }));
    }

    /// Shows that a step (or one attempt of it) ended, with what its record holds.
    pub(crate) fn finished(&self, entry: &Entry, done: &Done, took: Duration) {
        let (exit_code, verdict) = self
            .state
            .with(|s| {
                s.records
                    .get(entry.seq as usize)
                    .map(|r| (r.exit_code, r.verdict.clone()))
            })
            .unwrap_or_default();
        self.emit(Event::StepFinished {
            run: self.run,
            seq: entry.seq,
            name: entry.name.clone(),
            kind: entry.kind,
            depth: entry.depth,
            status: if done.is_ok() {
                StepStatus::Succeeded
            } else {
                StepStatus::Failed
            },
            duration_ms: millis(took),
            exit_code,
            verdict,
            error: done.error.clone(),
            asserts: done.asserts.clone(),
        });
    }

    /// One attempt, under the step's timeout; `true` when the timeout ended it.
    async fn attempt(
        &'a self,
        step: &'a At<Step>,
        entry: &'a Entry,
        attempt: u32,
        cancel: &CancellationToken,
        given: Given<'a>,
    ) -> (Done, bool) {
        let token = cancel.child_token();
        let work = self.kind(step, entry, attempt, token.clone(), given);
        // An approval's (or input's) timeout is its deadline, which its `on_timeout` (or
        // `default:`) answers.
        let limit = step.timeout.as_ref().filter(|_| {
            !matches!(
                step.kind,
                StepKind::Approval { .. } | StepKind::Input { .. }
            )
        });
        // Zero means no limit (steps' convention for every dial of an agent step): `timeout:
        // "0"` is no deadline, not one that has already passed.
        let Some(limit) = limit.map(|t| t.value.0).filter(|d| !d.is_zero()) else {
            return (work.await, false);
        };
        tokio::pin!(work);
        tokio::select! {
            d = &mut work => (d, false),
            () = tokio::time::sleep(limit) => {
                // Let the step stop its processes before reporting.
                token.cancel();
                let _ = work.await;
                (Done::failed(format!("timed out after {}", format_duration(limit))), true)
            }
        }
    }

    fn kind(
        &'a self,
        step: &'a At<Step>,
        entry: &'a Entry,
        attempt: u32,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> BoxFuture<'a, Done> {
        async move {
            if let Some(image) = &step.image {
                return Done::errored(crate::pipeline::container::no_runtime(&image.value));
            }
            match &step.kind {
                StepKind::Task { run, .. } => {
                    let work = Work::Task(run);
                    self.leaf(step, work, entry, attempt, cancel, given).await
                }
                StepKind::Agent(_) => {
                    self.leaf(step, Work::Agent, entry, attempt, cancel, given)
                        .await
                }
                StepKind::Do(steps) => self.sequence(steps, &cancel).await,
                StepKind::InParallel(p) => self.parallel(entry, p, &cancel).await,
                StepKind::Race(r) => self.race(entry, r, &cancel).await,
                StepKind::Ensemble(e) => self.ensemble(entry, e, &cancel).await,
                StepKind::Try(inner) => {
                    let d = self.exec(inner, cancel).await;
                    if d.status == Status::Aborted {
                        d
                    } else {
                        Done {
                            masked: (!d.is_ok()).then_some(d.status),
                            route: d.route,
                            ..Done::ok()
                        }
                    }
                }
                StepKind::Approval {
                    message,
                    on_timeout,
                    ..
                } => {
                    self.approval(step, (message, on_timeout.as_ref()), entry, cancel)
                        .await
                }
                StepKind::Input { .. } => self.input(step, entry, attempt, cancel).await,
                StepKind::LoadVar { name, file } => self.load_var(&name.value, file.as_ref()).await,
                StepKind::Get { resource: res, .. } => {
                    self.get_step(step, entry, attempt, &res.value, &cancel)
                        .await
                }
                StepKind::Put { resource: res, .. } => {
                    self.put_step(step, entry, &res.value, &cancel).await
                }
            }
        }
        .boxed()
    }

    /// Runs a task or agent step: on a worker when there are workers and the step may go
    /// to one, else here. The one leaf-running function, which a worker (`treadle
    /// worker`, whose context has no workers) calls too.
    pub(crate) async fn leaf(
        &'a self,
        step: &'a At<Step>,
        work: Work<'a>,
        entry: &'a Entry,
        attempt: u32,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> Done {
        // A cell keeps its values here, and so does a step handed text, so only whole
        // steps go to workers.
        if let Some(remote) = self.remote.as_ref().filter(|_| !given.is_local()) {
            return remote.leaf(self, step, entry, attempt, cancel).await;
        }
        match work {
            Work::Task(run) => {
                let run = match given.cell {
                    Some(c) => match c.render_run(&run.value) {
                        Ok(run) => run,
                        Err(e) => return Done::errored(format!("run: {e}")),
                    },
                    None => run.value.clone(),
                };
                let run = self.with_vars(&run);
                self.task(step, entry, attempt, &run, cancel, given).await
            }
            Work::Agent => self.agent(step, entry, attempt, cancel, given).await,
        }
    }

    /// Runs steps in order; stops at a failure or a verdict route.
    pub(crate) async fn sequence(
        &'a self,
        steps: &'a [At<Step>],
        cancel: &CancellationToken,
    ) -> Done {
        for (i, s) in steps.iter().enumerate() {
            let d = self.exec(s, cancel.clone()).await;
            if !d.is_ok() || d.route.is_some() {
                self.skip(&steps[i + 1..]);
                return d;
            }
        }
        Done::ok()
    }

    async fn parallel(
        &'a self,
        entry: &Entry,
        p: &'a InParallel,
        cancel: &CancellationToken,
    ) -> Done {
        let steps = p.steps();
        let limit = p.limit().map_or(steps.len(), |l| l as usize).max(1);
        let group = cancel.child_token();
        let fail_fast = p.fail_fast();
        let mark = self.log_mark();
        let branches: Vec<BoxFuture<'a, Option<Done>>> = steps
            .iter()
            .map(|s| self.branch(s, group.clone(), fail_fast))
            .collect();
        let results: Vec<Done> = futures::stream::iter(branches)
            .buffered(limit)
            .filter_map(std::future::ready)
            .collect()
            .await;
        // Branches finish in any order; the log shows them in declaration order.
        self.order_log(mark, &entry.path, super::flow::Members::Children);
        if self.root.is_cancelled() {
            return Done::aborted();
        }
        worst(&results)
    }

    /// One step of an `in_parallel`; `None` when it was skipped because a sibling failed.
    fn branch(
        &'a self,
        step: &'a At<Step>,
        group: CancellationToken,
        fail_fast: bool,
    ) -> BoxFuture<'a, Option<Done>> {
        async move {
            if group.is_cancelled() {
                self.skip(std::slice::from_ref(step));
                return None;
            }
            let d = self.exec(step, group.clone()).await;
            if fail_fast && !d.is_ok() {
                group.cancel();
            }
            Some(d)
        }
        .boxed()
    }
}

/// The outcome of a group of steps: the worst status wins (errored over failed).
pub(crate) fn worst(results: &[Done]) -> Done {
    let mut failures = results.iter().filter(|d| !d.is_ok());
    match failures
        .clone()
        .find(|d| d.status == Status::Errored)
        .or_else(|| failures.next())
    {
        Some(d) => Done {
            route: None,
            ..d.clone()
        },
        None => Done::ok(),
    }
}
