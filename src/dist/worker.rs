//! `treadle worker --nats URL [--slots N]`: takes steps off the steps stream, at most
//! `slots` at a time, runs each exactly as `treadle run` would (`run::one_leaf`), stores the
//! result under the attempt's id (`super::attempt_id`), then acknowledges the message.
//!
//! Each step once: every step runs under its lease ([`super::lease`]), so a copy of its
//! message handed to another worker, or to this one in another slot, while its holder lives
//! (redelivered after a NATS outage that outlasted the ack wait) finds the lease renewed
//! and is handed back, not run. The
//! delivery is extended every third of the ack wait from the moment the message is taken
//! until its result is stored, however long NATS is away; the result is stored with
//! `create` under the attempt id (the first stands), and an attempt whose id has a result is
//! acknowledged without running. A worker that dies stops extending and renewing, and the
//! step goes to another worker (which runs a task again from its start; an agent step goes
//! on from its mirrored session).
//!
//! Drain: `stop` (the first SIGTERM) stops taking steps; the running ones finish and their
//! results are stored; `abandon` (a second SIGTERM, or `--drain-timeout`) cancels them and
//! hands their messages back at once (nak) with their leases released.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::attempt_id::AttemptId;
use super::bus::{ACK_WAIT, Bus, retrying};
use super::connect::NatsConfig;
use super::lease::{self, Acquired, Lease};
use super::parsed::Parsed;
use super::wire::{Carried, StepJob, StepResult};
use super::{DistError, carry, takeover};
use crate::run::artifacts::Artifacts;
use crate::run::one_leaf::{OneLeaf, Questions, run_one};
use crate::run::transcript::{EventSink, Style, Transcript};
use crate::run::{AgentRunner, Store};
use treadle_session::event::SessionId;

/// How to work.
pub struct WorkerOptions {
    /// Where NATS is and how to reach it.
    pub nats: NatsConfig,
    /// Steps run at once.
    pub slots: usize,
    /// Where the worker keeps its state file and step directories.
    pub dir: PathBuf,
    /// Stops taking steps (the first SIGTERM or Ctrl-C); running ones finish.
    pub stop: CancellationToken,
    /// Hands running steps back at once (a second signal).
    pub abandon: CancellationToken,
    /// How long running steps may take to finish once `stop` is cancelled.
    pub drain_timeout: Duration,
}

/// What each step handler shares.
struct Worker {
    bus: Bus,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    dir: PathBuf,
    name: String,
    /// The pipelines parsed so far.
    parsed: Parsed,
    /// Step messages are refused unless signed with this key.
    signing: Option<super::sign::SigningKey>,
    /// Cancelled to hand running steps back.
    abandon: CancellationToken,
}

/// Works until `stop`, then drains (see the module's doc).
pub async fn work(options: WorkerOptions) -> Result<(), DistError> {
    let name = format!("worker-{}-{}", std::process::id(), super::unique_id());
    let bus = Bus::connect(&options.nats, &name).await?;
    let store = crate::run::open_store(options.dir.join("state.redb"))
        .await
        .map_err(|e| DistError::Setup {
            what: "the worker's state file",
            why: e.to_string(),
        })?;
    if options.nats.signing.is_none() {
        tracing::warn!(
            "no signing key (--nats-signing-key or {}): this worker runs any step message published on NATS",
            super::sign::ENV
        );
    }
    let worker = Arc::new(Worker {
        bus,
        store,
        agents: crate::run::agents::default_agent_runner(),
        dir: options.dir.clone(),
        name,
        parsed: Parsed::default(),
        signing: options.nats.signing.clone(),
        abandon: options.abandon.clone(),
    });
    let slots = options.slots.max(1);
    let free = Arc::new(Semaphore::new(slots));
    let beating = tokio::spawn(super::seen::beat(
        worker.bus.client.clone(),
        worker.name.clone(),
        slots,
        free.clone(),
    ));
    take_steps(&worker, &free, &options.stop).await?;
    drain(&worker, &free, slots, &options).await;
    beating.abort();
    Ok(())
}

/// Takes steps, one per free slot, until `stop`.
async fn take_steps(
    worker: &Arc<Worker>,
    free: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Result<(), DistError> {
    let mut consumer = None;
    while !stop.is_cancelled() {
        let permit = tokio::select! {
            p = free.clone().acquire_owned() => p.map_err(|e| DistError::Setup { what: "slots", why: e.to_string() })?,
            () = stop.cancelled() => break,
        };
        if consumer.is_none() {
            consumer = Some(
                retrying("joining the workers", || async {
                    let joined = worker.bus.workers().await;
                    if joined.is_err() {
                        // The stream may be gone (a store lost): made again for the next try.
                        let _ = worker.bus.ensure().await;
                    }
                    joined
                })
                .await,
            );
        }
        let Some(c) = &consumer else { continue };
        // One message per free slot: a message fetched is a message this worker owns.
        let fetched = c
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await;
        let mut batch = match fetched {
            Ok(b) => b,
            Err(_) => {
                consumer = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        match batch.next().await {
            // Taken as the drain began: handed back at once.
            Some(Ok(message)) if stop.is_cancelled() => {
                let _ = message.ack_with(AckKind::Nak(None)).await;
            }
            Some(Ok(message)) => {
                let worker = worker.clone();
                tokio::spawn(async move {
                    worker.handle(message).await;
                    drop(permit);
                });
            }
            Some(Err(_)) => {
                consumer = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None => {}
        }
    }
    Ok(())
}

/// Waits for the running steps to finish and store their results, up to the drain
/// timeout or a second signal; then hands back what still runs, and waits for that.
async fn drain(worker: &Worker, free: &Arc<Semaphore>, slots: usize, options: &WorkerOptions) {
    let running = slots - free.available_permits();
    if running == 0 {
        return;
    }
    crate::console::tell!(
        "{}: draining: finishing {running} running step(s) (up to {}s; again to hand them back now)",
        worker.name,
        options.drain_timeout.as_secs()
    );
    let all = u32::try_from(slots).unwrap_or(u32::MAX);
    tokio::select! {
        _ = free.acquire_many(all) => return,
        () = tokio::time::sleep(options.drain_timeout) => {
            crate::console::tell!("{}: drain timeout: handing the running steps back", worker.name);
        }
        () = options.abandon.cancelled() => {
            crate::console::tell!("{}: handing the running steps back", worker.name);
        }
    }
    worker.abandon.cancel();
    let _ = free.acquire_many(all).await;
}

/// How a step went on this worker.
enum Leased {
    /// It ran (or its holder's committed result was found): store and acknowledge.
    Ran(Box<StepResult>),
    /// Another worker holds its lease and renews it.
    Busy,
    /// This worker lost its lease while running it (why): nothing is committed.
    Lost(String),
    /// The worker is handing its steps back (drain over): nothing is committed.
    HandedBack,
}

/// Collects a step's events, and passes its token deltas on live.
struct Collect {
    events: Mutex<Vec<String>>,
    client: async_nats::Client,
    attempt_id: AttemptId,
}

impl EventSink for Collect {
    fn event(&self, json: &str) {
        if let Ok(mut e) = self.events.lock() {
            e.push(json.to_owned());
        }
    }
    fn token(&self, _step: u32, text: &str) {
        let (client, subject) = (
            self.client.clone(),
            format!("treadle.tokens.{}", self.attempt_id),
        );
        let text = bytes::Bytes::from(text.to_owned());
        // Live only: a lost delta is lost, as on the local journal's channel.
        tokio::spawn(async move {
            let _ = client.publish(subject, text).await;
        });
    }
}

impl Worker {
    async fn handle(&self, message: async_nats::jetstream::Message) {
        let Some(job) = self.admit(&message).await else {
            return;
        };
        // The delivery stays ours from now until the result is stored (or handed back).
        let extend = CancellationToken::new();
        let ticking = tokio::spawn(keep_alive(message.clone(), extend.clone()));
        let settled = self.settle(&job).await;
        match settled {
            // The result is stored: a lost acknowledgement only means a redelivery that
            // is recognised by the attempt id.
            Some(Leased::Ran(_)) | None => {
                let _ = message.ack().await;
            }
            // Its holder is alive: the step comes back later, to whoever is free.
            Some(Leased::Busy) => {
                let delay = Some(super::lease::LEASE_TIME);
                let _ = message.ack_with(AckKind::Nak(delay)).await;
            }
            // The delivery is the new holder's now: acknowledging it could end the step
            // while that worker runs it.
            Some(Leased::Lost(why)) => {
                tracing::warn!("step {} is not committed here: {why}", job.attempt_id);
            }
            Some(Leased::HandedBack) => {
                let _ = message.ack_with(AckKind::Nak(None)).await;
                tracing::warn!("step {} handed back", job.attempt_id);
            }
        }
        extend.cancel();
        let _ = ticking.await;
    }

    /// The step the message carries, when it parses and (with a signing key) is signed by
    /// it; otherwise the message is refused (terminated: never delivered again) and logged.
    async fn admit(&self, message: &async_nats::jetstream::Message) -> Option<StepJob> {
        if let Some(key) = &self.signing {
            let given = message
                .headers
                .as_ref()
                .and_then(|h| h.get(super::sign::HEADER))
                .map(|v| v.as_str());
            if let Err(why) = key.verify(&message.payload, given) {
                tracing::error!(
                    "refusing a step message on {}: {why}; it is not run",
                    message.subject
                );
                let _ = message.ack_with(AckKind::Term).await;
                return None;
            }
        }
        match serde_json::from_slice(&message.payload) {
            Ok(j) => Some(j),
            Err(e) => {
                tracing::warn!("dropping a step message that does not parse: {e}");
                let _ = message.ack_with(AckKind::Term).await;
                None
            }
        }
    }

    /// Runs the step unless its attempt id has a result, and stores its result; `None`: it had
    /// one already.
    async fn settle(&self, job: &StepJob) -> Option<Leased> {
        let finished = retrying("reading a step's result", || {
            self.bus.done.get(job.attempt_id.as_str())
        })
        .await;
        if finished.is_some() {
            return None;
        }
        let outcome = self.leased(job).await;
        if let Leased::Ran(result) = &outcome {
            self.store_result(&job.attempt_id, result).await;
        }
        Some(outcome)
    }

    /// Runs the step under its lease (committed into the lease first).
    async fn leased(&self, job: &StepJob) -> Leased {
        match lease::acquire(&self.bus, &job.attempt_id, &self.name).await {
            Acquired::Finished(result) => Leased::Ran(result),
            Acquired::Busy => Leased::Busy,
            Acquired::Held(lease) => {
                let result = self.run(job, &lease).await;
                if self.abandon.is_cancelled() {
                    lease.release().await;
                    return Leased::HandedBack;
                }
                match lease.commit(&result).await {
                    Ok(()) => Leased::Ran(Box::new(result)),
                    Err(why) => Leased::Lost(why.to_string()),
                }
            }
        }
    }

    /// Stores `result` under `attempt_id` unless one is there: the first one stands.
    async fn store_result(&self, attempt_id: &AttemptId, result: &StepResult) {
        let value = bytes::Bytes::from(serde_json::to_vec(result).unwrap_or_default());
        retrying("storing a step's result", || async {
            match self
                .bus
                .done
                .create(attempt_id.as_str(), value.clone())
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == async_nats::jetstream::kv::CreateErrorKind::AlreadyExists => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
        .await;
    }

    /// Runs the step; any failure to set it up is its result (errored).
    async fn run(&self, job: &StepJob, lease: &Lease) -> StepResult {
        let place = self.dir.join("steps").join(job.attempt_id.as_str());
        let result = match self.run_in(job, &place, lease).await {
            Ok(r) => r,
            Err(e) => StepResult {
                status: "errored".to_owned(),
                error: Some(e.to_string()),
                failure: Some(crate::run::FailureKind::Infrastructure),
                ..StepResult::cancelled()
            },
        };
        let _ = tokio::fs::remove_dir_all(&place).await;
        StepResult {
            worker: self.name.clone(),
            ..result
        }
    }

    async fn run_in(
        &self,
        job: &StepJob,
        place: &std::path::Path,
        lease: &Lease,
    ) -> Result<StepResult, DistError> {
        let loaded = self.parsed.load(&job.file, &job.job, &job.source)?;
        let job_def = loaded.job(Some(&job.job)).map_err(DistError::NoJob)?;
        let artifacts = Arc::new(Artifacts::create(place, job.run)?);
        for input in &job.inputs {
            let incoming = artifacts.root().join("incoming").join(&input.name);
            carry::receive(&self.bus, &input.digest, &incoming).await?;
            artifacts.adopt(&input.name, &incoming)?;
        }
        let sink = Arc::new(Collect {
            events: Mutex::default(),
            client: self.bus.client.clone(),
            attempt_id: job.attempt_id.clone(),
        });
        // A leased step whose session events were mirrored by an earlier holder goes on
        // from that session.
        let resume = match job.agent {
            true => self.adopt(&job.attempt_id).await?,
            false => None,
        };
        let secrets = crate::run::redactor(&loaded);
        let transcript = Arc::new(Transcript::new(Style::Quiet, secrets).with_sink(sink.clone()));
        // A step stops when its lease is lost, or when the worker hands its steps back.
        let cancel = lease.lost().child_token();
        let handing_back = {
            let (abandon, cancel) = (self.abandon.clone(), cancel.clone());
            tokio::spawn(async move {
                abandon.cancelled().await;
                cancel.cancel();
            })
        };
        let listening = self
            .listen_for_cancel(&job.attempt_id, cancel.clone())
            .await;
        let outcome = run_one(OneLeaf {
            loaded: &loaded,
            job: job_def,
            seq: job.seq,
            attempt: job.attempt,
            run: job.run,
            store: self.store.clone(),
            transcript,
            artifacts: artifacts.clone(),
            agents: self.agents.clone(),
            vars: job.vars.clone(),
            tokens_spent: job.tokens_spent,
            micro_usd_spent: job.micro_usd_spent,
            cancel: cancel.clone(),
            fence: job.agent.then(|| lease.fence()),
            resume,
            questions: job.agent.then(|| {
                let asks =
                    super::asks::Remote::new(self.bus.clone(), &job.attempt_id, cancel.clone());
                Questions {
                    asker: asks.clone(),
                    answerer: asks.answerer(),
                }
            }),
            cell: job.cell.clone(),
        })
        .await
        .map_err(DistError::Step);
        if let Some(l) = listening {
            l.abort();
        }
        handing_back.abort();
        let outcome = outcome?;
        let mut outputs = Vec::new();
        if outcome.done.is_ok() {
            for name in outcome.outputs.clone() {
                if let Some(dir) = artifacts.artifact(&name) {
                    let digest = carry::send(&self.bus, &dir).await?;
                    outputs.push(Carried { name, digest });
                }
            }
        }
        let events = sink.events.lock().map(|e| e.clone()).unwrap_or_default();
        Ok(StepResult {
            status: outcome.done.status.name().to_owned(),
            error: outcome.done.error().map(str::to_owned),
            failure: outcome.done.kind(),
            route: outcome.done.route.clone(),
            record: outcome.record,
            events,
            outputs,
            tokens: outcome.tokens,
            micro_usd: outcome.micro_usd,
            worker: String::new(),
        })
    }

    /// Rebuilds, in this worker's journal, the session an earlier holder of attempt
    /// `attempt_id` mirrored; the session to restore, if there is one.
    async fn adopt(&self, attempt_id: &AttemptId) -> Result<Option<SessionId>, DistError> {
        let events = takeover::mirrored(&self.bus, attempt_id).await?;
        if events.is_empty() {
            return Ok(None);
        }
        let count = events.len();
        let session = takeover::adopt(self.store.journal(), events).await?;
        if let Some(session) = session {
            tracing::warn!(
                "step {attempt_id}: taken over; restoring session {session} from {count} mirrored events"
            );
        }
        Ok(session)
    }

    /// Cancels `cancel` when the server says to stop the step.
    async fn listen_for_cancel(
        &self,
        attempt_id: &AttemptId,
        cancel: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let mut sub = self
            .bus
            .client
            .subscribe(format!("treadle.cancel.{attempt_id}"))
            .await
            .ok()?;
        Some(tokio::spawn(async move {
            if sub.next().await.is_some() {
                cancel.cancel();
            }
        }))
    }
}

/// Extends the delivery of a running step until `done`.
async fn keep_alive(message: async_nats::jetstream::Message, done: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(ACK_WAIT / 3) => {
                let _ = message.ack_with(AckKind::Progress).await;
            }
            () = done.cancelled() => return,
        }
    }
}
