//! The server's side (`treadle serve --nats`): the walker plans the run as always, and each
//! task or agent step it reaches is put on the steps stream instead of run here; the
//! walker waits for the step's result under its attempt's id and goes on as if it had run the step
//! itself (record, events, outputs, tokens).

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::attempt_id::AttemptId;
use super::bus::Bus;
use super::wire::{CANCELLED, Carried, StepJob, StepResult};
use super::{DistError, carry};
use crate::cache::StepCache;
use crate::cache::digest::Digest;
use crate::cache::records::SuccessRecord;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::exec::{Ctx, Done, RemoteSteps};
use crate::run::failure::FailureKind;
use crate::run::transcript::Event;

/// One server's connection to its workers.
pub struct Dispatcher {
    bus: Bus,
    // Makes attempt ids unique across servers (and restarts of one) sharing a NATS.
    server: String,
    /// Step messages are signed with it, when given.
    signing: Option<super::sign::SigningKey>,
    /// The workers heard from.
    seen: Arc<super::seen::Seen>,
    /// Steps' figures for `/metrics`.
    stats: super::stats::Stats,
    /// How long a step may wait for a worker before the server logs it
    /// (`--unclaimed-warning`).
    unclaimed_warning: std::time::Duration,
}

impl Dispatcher {
    /// Connects to NATS at `url` (waiting for it) and makes the streams and buckets. The
    /// server's id comes from its state file, whose run ids are unique, so attempt ids and
    /// event subjects are unique across servers sharing one NATS and across restarts. A
    /// step no worker took within `unclaimed_warning` is logged.
    pub async fn connect(
        nats: &super::connect::NatsConfig,
        state: &std::path::Path,
        unclaimed_warning: std::time::Duration,
    ) -> Result<Arc<Self>, DistError> {
        let bus = Bus::connect(nats, "treadle serve").await?;
        let path = std::fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
        let server = blake3::hash(path.to_string_lossy().as_bytes()).to_hex()[..12].to_owned();
        let seen = super::seen::Seen::listen(bus.client.clone());
        Ok(Arc::new(Self {
            bus,
            server,
            signing: nats.signing.clone(),
            seen,
            stats: super::stats::Stats::default(),
            unclaimed_warning,
        }))
    }

    /// The workers heard from lately.
    pub fn workers(&self) -> Vec<super::seen::Beat> {
        self.seen.alive()
    }

    /// Steps' figures so far.
    pub fn stats(&self) -> &super::stats::Stats {
        &self.stats
    }

    /// The bus, for the events mirror.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// This server's id in attempt ids and event subjects.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// What one run needs: `source` is the pipeline text as loaded (vars filled in).
    pub fn for_run(self: &Arc<Self>, source: String) -> Arc<RemoteRun> {
        Arc::new(RemoteRun {
            dispatcher: self.clone(),
            source,
        })
    }
}

/// One run's steps going to workers.
pub struct RemoteRun {
    dispatcher: Arc<Dispatcher>,
    source: String,
}

#[async_trait::async_trait]
impl RemoteSteps for RemoteRun {
    async fn shared_hit(
        &self,
        cache: &Arc<StepCache>,
        key: &Digest,
        scratch: PathBuf,
    ) -> Option<SuccessRecord> {
        super::shared_cache::fetch(&self.dispatcher.bus, cache, key, scratch).await
    }

    async fn share(&self, outcome: &SuccessRecord, dirs: Vec<(String, PathBuf)>) {
        super::shared_cache::share(&self.dispatcher.bus, outcome, dirs).await;
    }

    async fn leaf(
        &self,
        ctx: &Ctx<'_>,
        step: &At<Step>,
        entry: &Entry,
        attempt: u32,
        cancel: CancellationToken,
        cell: Option<crate::run::cell::CellValues>,
    ) -> Done {
        let bus = &self.dispatcher.bus;
        let (server, run, seq) = (&self.dispatcher.server, ctx.run, entry.seq);
        let attempt_id = AttemptId::new(server, run, seq, cell.as_ref().map(|c| c.index), attempt);
        let mut inputs = Vec::new();
        for name in &step.inputs {
            // A missing input is the worker's to report, as `treadle run` would.
            let Some(dir) = ctx.artifacts.artifact(&name.value) else {
                continue;
            };
            match carry::send(bus, &dir).await {
                Ok(digest) => inputs.push(Carried {
                    name: name.value.clone(),
                    digest,
                }),
                Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
            }
        }
        let job = StepJob {
            attempt_id: attempt_id.clone(),
            run: ctx.run,
            seq: entry.seq,
            attempt,
            file: ctx.loaded.file.clone(),
            source: self.source.clone(),
            job: ctx.job.name.value.clone(),
            vars: ctx.state.with(|s| s.vars.clone()),
            inputs,
            tokens_spent: ctx.state.tokens(),
            micro_usd_spent: ctx.state.micro_usd(),
            agent: matches!(&step.kind, crate::pipeline::StepKind::Agent(_)),
            cell: cell.clone(),
        };
        let payload = match serde_json::to_vec(&job) {
            Ok(p) => bytes::Bytes::from(p),
            Err(e) => {
                return Done::fail(
                    FailureKind::Infrastructure,
                    format!("cannot send step `{}`: {e}", entry.name),
                );
            }
        };
        let tokens = self.forward_tokens(ctx, &attempt_id, entry.seq).await;
        let signing = self.dispatcher.signing.as_ref();
        let queued = super::queued::Queued {
            bus,
            attempt_id: &attempt_id,
            payload: &payload,
            signing,
            step: &entry.name,
            run: ctx.run,
            seen: &self.dispatcher.seen,
            warn_after: self.dispatcher.unclaimed_warning,
        };
        let began = std::time::Instant::now();
        mark_queued(ctx, entry).await;
        let seq = queued.publish(&attempt_id).await;
        let result = tokio::select! {
            r = result_once_taken(bus, ctx, entry, &attempt_id) => r,
            () = cancel.cancelled() => self.give_up(&attempt_id).await,
            // Its questions for a person are asked here, where the run's approvals are.
            () = super::asks::serve(bus, ctx, step, entry, &attempt_id, &cancel) => wait_result(bus, &attempt_id).await,
            // A step lost from NATS (its stream came back empty) is queued again, a few
            // times, then fails naming what was lost: never a silent wait.
            lost = queued.watch(seq) => {
                if let Some(t) = tokens {
                    t.abort();
                }
                return Done::fail(FailureKind::Infrastructure, lost);
            }
        };
        self.dispatcher.stats.finished(began.elapsed());
        if let Some(t) = tokens {
            t.abort();
        }
        if result.status == CANCELLED {
            return ctx.cancelled();
        }
        let segments = cell.map(|c| c.segments);
        apply(bus, ctx, entry, &result, segments.as_deref()).await
    }
}

impl RemoteRun {
    /// Token deltas of the step, passed on to the run's live followers while it runs.
    async fn forward_tokens(
        &self,
        ctx: &Ctx<'_>,
        attempt_id: &AttemptId,
        seq: u32,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let bus = &self.dispatcher.bus;
        let mut sub = bus
            .client
            .subscribe(format!("treadle.tokens.{attempt_id}"))
            .await
            .ok()?;
        let transcript = ctx.transcript.clone();
        Some(tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                transcript.token(seq, &String::from_utf8_lossy(&m.payload));
            }
        }))
    }

    /// Stops the step: tells its worker, and records `cancelled` under its attempt's id
    /// unless a result got there first (then that result stands).
    async fn give_up(&self, attempt_id: &AttemptId) -> StepResult {
        let bus = &self.dispatcher.bus;
        let _ = bus
            .client
            .publish(format!("treadle.cancel.{attempt_id}"), bytes::Bytes::new())
            .await;
        let marker = serde_json::to_vec(&StepResult::cancelled()).unwrap_or_default();
        match bus.done.create(attempt_id.as_str(), marker.into()).await {
            Ok(_) => StepResult::cancelled(),
            Err(_) => wait_result(bus, attempt_id).await,
        }
    }
}

/// Marks the step `queued` (record and `step_queued` event) before its message is
/// published: it reads so until a worker takes it ([`result_once_taken`]).
async fn mark_queued(ctx: &Ctx<'_>, entry: &Entry) {
    crate::run::exec::record::update_at(ctx, entry, |r| {
        r.status = crate::run::state::StepStatus::Queued;
        r.worker = None;
    })
    .await;
    ctx.emit(Event::StepQueued {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        depth: entry.depth,
    });
}

/// Waits for the result under `attempt_id`; meanwhile, once a worker takes the step (makes its
/// lease), marks it running on that worker. A step whose result comes before its lease is
/// seen (a quick one) is marked taken by the worker that ran it, so that every step run on
/// a worker says which.
async fn result_once_taken(
    bus: &Bus,
    ctx: &Ctx<'_>,
    entry: &Entry,
    attempt_id: &AttemptId,
) -> StepResult {
    let result = wait_result(bus, attempt_id);
    tokio::pin!(result);
    let holder = super::bus::wait_for(&bus.leases, attempt_id, super::lease::holder);
    let worker = tokio::select! {
        r = &mut result => {
            if !r.worker.is_empty() {
                mark_taken(ctx, entry, r.worker.clone()).await;
            }
            return r;
        }
        worker = holder => worker,
    };
    mark_taken(ctx, entry, worker).await;
    result.await
}

/// Marks the step running on `worker`: its record and a `step_taken` event.
async fn mark_taken(ctx: &Ctx<'_>, entry: &Entry, worker: String) {
    crate::run::exec::record::update_at(ctx, entry, |r| {
        r.status = crate::run::state::StepStatus::Running;
        r.worker = Some(worker.clone());
    })
    .await;
    ctx.emit(Event::StepTaken {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        depth: entry.depth,
        worker,
    });
}

/// Waits for the result of attempt `attempt_id`, through NATS restarts.
pub async fn wait_result(bus: &Bus, attempt_id: &AttemptId) -> StepResult {
    super::bus::wait_for(&bus.done, attempt_id, |bytes| {
        serde_json::from_slice(bytes).ok()
    })
    .await
}

/// Takes a worker's result into the run: its events, its record, its tokens, its outputs
/// (a cell's, `segments`, into its place in its block's artifacts, as the local executor
/// collects them).
async fn apply(
    bus: &Bus,
    ctx: &Ctx<'_>,
    entry: &Entry,
    result: &StepResult,
    segments: Option<&[String]>,
) -> Done {
    for line in &result.events {
        ctx.transcript.emit_line(line);
    }
    if let Some(rec) = result.record.clone() {
        let worker = Some(result.worker.clone()).filter(|w| !w.is_empty());
        crate::run::exec::record::update_at(ctx, entry, move |r| {
            r.worker = worker.or(r.worker.take());
            // Whole, as a cache hit and a replay copy it: field by field, the verdict's
            // `note` was dropped, and `context: { from }` after the step lost it.
            r.produced = rec.produced;
        })
        .await;
    }
    ctx.state.spend(result.tokens, result.micro_usd);
    let done = result.done();
    let place = match entry.cell {
        Some(cell) => format!("{}-c{cell}", entry.seq),
        None => entry.seq.to_string(),
    };
    for out in &result.outputs {
        let incoming = ctx
            .artifacts
            .root()
            .join("incoming")
            .join(format!("{place}-{}", out.name));
        let _ = std::fs::remove_dir_all(&incoming);
        if let Err(e) = carry::receive(bus, &out.digest, &incoming).await {
            return Done::fail(FailureKind::Infrastructure, e.to_string());
        }
        let adopted = match segments {
            Some(segments) => ctx.artifacts.adopt_cell(&out.name, &incoming, segments),
            None => ctx.artifacts.adopt(&out.name, &incoming),
        };
        if let Err(e) = adopted {
            return Done::fail(FailureKind::Infrastructure, e.to_string());
        }
    }
    done
}
