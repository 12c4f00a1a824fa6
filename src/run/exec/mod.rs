//! The walker: runs one step with its guard, attempts, timeout and hooks, and the
//! containers (`do`, `in_parallel`, `try`), recording every transition in the state file
//! and the transcript.
//!
//! This module defines the run's context ([`Ctx`]: what a run shares, immutable, and the
//! single owner of its mutable state) and the walker, its only methods. Each step kind is
//! a child module of functions that take the context as an argument (`ctx: &Ctx`): the
//! job's own walk (`job`), `race`/`across`/`when` (`flow`), `ensemble`, hooks, approvals
//! (`approval_step`), `input`, `http:` (`http_step`), `get`/`put` (`resource`, `resource_scripted`), the leaf
//! steps (`leaf`), the cache around them (`cached`), a failed step's kept outputs (`kept`),
//! and what the walker records (`record`). The children call back into the walker (`ctx.exec`) for nested steps, so
//! no child depends on another in a circle.
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

pub(crate) mod agent_from_run;
pub(crate) mod approval_step;
pub(crate) mod blame;
pub(crate) mod cached;
pub(crate) mod continued;
pub(crate) mod ensemble;
pub(crate) mod every;
pub(crate) mod fix;
pub(crate) mod flow;
pub(crate) mod forked;
pub(crate) mod http_step;
pub mod input;
pub(crate) mod job;
pub(crate) mod kept;
pub mod leaf;
pub(crate) mod outcome_steps;
pub(crate) mod record;
pub(crate) mod resource;
pub(crate) mod resource_scripted;
pub(crate) mod step_dir;
pub(crate) mod stored;
pub(crate) mod version;
pub(crate) mod walk;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub(crate) use self::outcome_steps::OutcomeSteps;
use super::artifacts::Artifacts;
use super::cell::Given;
use super::failure::FailureKind;
use super::ports::AgentRunner;
pub(crate) use super::run_state::Logged;
use super::run_state::Owner;
use super::state::{StepRecord, StepStatus, Store};
use super::transcript::{Event, Transcript};
use super::work::Work;
use crate::cache::StepCache;
use crate::cache::digest::Digest;
use crate::cache::records::SuccessRecord;
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::{Entry, Outline};
use crate::pipeline::{At, InParallel, Job, Loaded, Step, StepKind};

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
        cell: Option<crate::run::cell::CellValues>,
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
/// single owner of its mutable state. Built only by `super::lifecycle::Run::ctx`. What one
/// step is given by its block travels as an argument ([`Given`]), not here.
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
    /// How the run started: what it may take from the cache and from an earlier run.
    pub mode: &'a super::mode::Mode,
    /// Someone can answer approvals while the run waits even though its stdin is not a
    /// terminal (`treadle serve` runs it).
    pub answerable: bool,
    /// When the job's `timeout:` passes: no step or cell starts after it.
    pub deadline: Option<Instant>,
    /// The version each `get` of a resource fetches, by resource (a triggered build's
    /// inputs); others fetch their latest.
    pub versions: &'a std::collections::BTreeMap<String, String>,
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
    /// The run's mutable state (records, log, vars, ...) and its budget counters, owned
    /// by the run (`super::lifecycle::Run`), which outlives every step's context.
    pub state: &'a Owner,
}

pub(crate) use super::done::worst;
pub use super::done::{Done, Status};
pub(crate) use crate::clock::now_ms;

impl<'a> Ctx<'a> {
    pub(crate) fn emit(&self, event: Event) {
        self.transcript.emit(&event);
    }

    /// A line of the step at `entry`'s output, as the step's own command would print it
    /// (a `get`'s version, an `http` step's body, a replayed step's tail).
    pub(crate) fn step_line(&self, entry: &Entry, line: String) {
        self.emit(self.step_line_event(entry, line));
    }

    /// [`Self::step_line`]'s event, for a commit of several.
    pub(crate) fn step_line_event(&self, entry: &Entry, line: String) -> Event {
        Event::Output {
            run: self.run,
            seq: entry.seq,
            stream: "stdout".into(),
            line,
        }
    }

    /// The status a cancelled step ends with: aborted on Ctrl-C, else interrupted by a
    /// sibling (`fail_fast`) or a timeout the caller reports.
    pub(crate) fn cancelled(&self) -> Done {
        if self.root.is_cancelled() {
            Done::aborted()
        } else {
            Done::interrupted()
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
                    reason: None,
                });
            }
        }
    }

    /// Skips `step`, which its `when:` guard kept from running, saying `reason` (when the
    /// guard gives one) in its record's `note` and the transcript's line.
    async fn guarded_off(&self, step: &At<Step>, entry: &Entry, reason: Option<&str>) {
        let Some(reason) = reason else {
            return self.skip(std::slice::from_ref(step));
        };
        let note = reason.to_owned();
        record::update(self, entry.seq, |r| r.produced.note = Some(note)).await;
        self.emit(Event::StepSkipped {
            run: self.run,
            seq: entry.seq,
            name: entry.name.clone(),
            depth: entry.depth,
            reason: Some(reason.to_owned()),
        });
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
                return Done::fail(
                    FailureKind::Infrastructure,
                    format!("step `{}` is missing from the outline", step.display_name()),
                );
            };
            if let Some(across) = step.across.as_ref().filter(|_| given.cell.is_none()) {
                return flow::across(self, (step, across), outlined, &cancel).await;
            }
            let entry = &match given.cell {
                Some(c) => c.entry(outlined),
                None => outlined.clone(),
            };
            if let Some(when) = &step.when {
                match flow::guard(self, step, entry, &when.value, &cancel).await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.guarded_off(step, entry, when.skip_reason()).await;
                        return Done::ok();
                    }
                    Err(done) => return outcome_steps::after_step(self, step, done, &cancel).await,
                }
            }
            let started = Instant::now();
            // A replayed step (or cell) has been shown and recorded; only its hooks remain.
            let before = cached::cache_before(self, step, entry, given.cell).await;
            if let Some(d) = before.as_ref().filter(|d| d.is_ok()) {
                record::log_leaf(self, step, entry);
                return outcome_steps::after_step(self, step, d.clone(), &cancel).await;
            }
            // Written with the first attempt's `step_started` (`record::started`).
            record::change(self, entry.seq, |r| {
                r.status = StepStatus::Running;
                r.started_ms = Some(now_ms());
                r.set_failure(None);
            });
            let mut done = self
                .attempts(step, entry, before.as_ref(), &cancel, given)
                .await;
            // An agent's work on the run's git repositories is committed or wiped before the
            // step counts as succeeded (the rule: `crate::agent::commit`).
            if done.is_ok()
                && let Some(failed) = resource::keep_work(self, step, entry).await
            {
                done = failed;
            }
            kept::keep_failed(self, step, entry, &done).await;
            // The outcome is stored in the commit that marks the step succeeded
            // (`record::ended`), so a step its record calls succeeded never runs again. One
            // that started from kept outputs read what its key does not cover: not stored.
            let stored = if done.is_ok() && !kept::started_from_kept(self, entry) {
                cached::cache_after(self, step, entry).await
            } else {
                None
            };
            let shared = stored.as_ref().and_then(stored::Stored::shared);
            record::ended(self, step, entry, &done, started, stored).await;
            cached::share(self, shared).await;
            // A step its group cancelled (a lost race, a fail_fast sibling) did not run to
            // its end, so it is not in the execution log.
            if done.is_ok() || !cancel.is_cancelled() {
                record::log_leaf(self, step, entry);
            }
            outcome_steps::after_step(self, step, done, &cancel).await
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
            record::started(self, entry, attempt).await;
            let t0 = Instant::now();
            let timed_out;
            (done, timed_out) = self.attempt(step, entry, attempt, cancel, given).await;
            // The same work against the same deadline would time out again.
            if done.is_ok() || done.status == Status::Aborted || timed_out || attempt == attempts {
                break;
            }
            record::finished(self, entry, &done, t0.elapsed());
        }
        done
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
        let limit = step
            .timeout
            .as_ref()
            .filter(|_| !matches!(step.kind, StepKind::Approval { .. } | StepKind::Input(_)));
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
                let why = format!("timed out after {}", format_duration(limit));
                (Done::fail(FailureKind::Timeout, why), true)
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
            if let Some(container) = &step.container {
                let why = crate::pipeline::container::no_runtime(&container.image.value);
                return Done::fail(FailureKind::Configuration, why);
            }
            match &step.kind {
                StepKind::Task { run, keys, .. } => {
                    let work = Work::Task(run, keys);
                    self.leaf(step, work, entry, attempt, cancel, given).await
                }
                StepKind::Agent(call) => {
                    self.leaf(step, Work::Agent(call), entry, attempt, cancel, given)
                        .await
                }
                StepKind::Do(steps) => self.sequence(steps, &cancel).await,
                StepKind::InParallel(p) => self.parallel(entry, p, &cancel).await,
                StepKind::Race(r) => flow::race(self, entry, r, &cancel).await,
                StepKind::Ensemble(e) => ensemble::ensemble(self, entry, e, &cancel).await,
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
                    policy,
                    ..
                } => {
                    let asked = approval_step::Asked {
                        message,
                        on_timeout: on_timeout.as_ref(),
                        policy,
                    };
                    approval_step::approval(self, step, asked, entry, cancel).await
                }
                StepKind::Input(asked) => {
                    input::input(self, step, asked, entry, attempt, cancel).await
                }
                StepKind::LoadVar { name, file } => {
                    flow::load_var(self, &name.value, file.as_ref()).await
                }
                StepKind::Http { call, .. } => {
                    http_step::http(self, step, entry, attempt, call, cancel).await
                }
                StepKind::Get(get) => resource::get_step(self, entry, attempt, get, &cancel).await,
                StepKind::Put(put) => resource::put_step(self, step, entry, put, &cancel).await,
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
        // A cell goes with its values (its outputs come back into its place in its block's
        // artifact); a step handed text stays.
        let to_worker = given.handed.is_none();
        if let Some(remote) = self.remote.as_ref().filter(|_| to_worker) {
            let cell = given.cell.map(crate::run::cell::Cell::values);
            return remote.leaf(self, step, entry, attempt, cancel, cell).await;
        }
        match work {
            Work::Task(run, keys) => {
                let run = match given.cell {
                    Some(c) => match c.render_run(&run.value) {
                        Ok(run) => run,
                        Err(e) => {
                            return Done::fail(FailureKind::Configuration, format!("run: {e}"));
                        }
                    },
                    None => run.value.clone(),
                };
                let run = flow::with_vars(self, &run);
                leaf::task(self, step, entry, attempt, (&run, keys), cancel, given).await
            }
            Work::Agent(call) => {
                leaf::agent(self, (step, call), entry, attempt, cancel, given).await
            }
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
        p: &'a InParallel<Step>,
        cancel: &CancellationToken,
    ) -> Done {
        let steps = p.steps();
        let limit = p.limit().map_or(steps.len(), |l| l as usize).max(1);
        let group = cancel.child_token();
        let fail_fast = p.fail_fast();
        let mark = record::log_mark(self);
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
        record::order_log(self, mark, &entry.path, record::Members::Children);
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
