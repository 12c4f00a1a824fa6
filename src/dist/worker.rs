//! `treadle worker --nats URL [--slots N]`: takes steps off the steps stream, at most
//! `slots` at a time, runs each exactly as `treadle run` would (`run::one_leaf`), stores the
//! result under the step's key, then acknowledges the message. While a step runs its
//! delivery is extended every third of the ack wait; a worker that dies stops extending,
//! and the step goes to another worker. A step whose key already has a result (it finished
//! before a redelivery, or the server gave up on it) is acknowledged without running. An
//! agent step runs under its lease ([`super::lease`]): only its holder's result is stored.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::bus::{ACK_WAIT, Bus, retrying};
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
    /// The NATS server.
    pub url: String,
    /// Steps run at once.
    pub slots: usize,
    /// Where the worker keeps its state file and step directories.
    pub dir: PathBuf,
    /// Stops taking steps (Ctrl-C); running ones are given back by not acknowledging them.
    pub stop: CancellationToken,
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
}

/// Works until `stop`.
pub async fn work(options: WorkerOptions) -> Result<(), DistError> {
    let name = format!("worker-{}-{}", std::process::id(), super::unique_id());
    let bus = Bus::connect(&options.url, &name).await?;
    let store = crate::run::open_store(options.dir.join("state.redb"))
        .await
        .map_err(|e| DistError::Setup {
            what: "the worker's state file",
            why: e.to_string(),
        })?;
    let worker = Arc::new(Worker {
        bus,
        store,
        agents: crate::run::agents::default_agent_runner(),
        dir: options.dir.clone(),
        name,
        parsed: Parsed::default(),
    });
    let slots = Arc::new(Semaphore::new(options.slots.max(1)));
    let mut consumer = None;
    while !options.stop.is_cancelled() {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.map_err(|e| DistError::Setup { what: "slots", why: e.to_string() })?,
            () = options.stop.cancelled() => break,
        };
        if consumer.is_none() {
            consumer = Some(retrying("joining the workers", || worker.bus.workers()).await);
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

/// How a step went on this worker.
enum Leased {
    /// It ran (or its holder's committed result was found): store and acknowledge.
    Ran(Box<StepResult>),
    /// Another worker holds its lease and renews it.
    Busy,
    /// This worker lost its lease while running it (why): nothing is committed.
    Lost(String),
}

/// Collects a step's events, and passes its token deltas on live.
struct Collect {
    events: Mutex<Vec<String>>,
    client: async_nats::Client,
    key: String,
}

impl EventSink for Collect {
    fn event(&self, json: &str) {
        if let Ok(mut e) = self.events.lock() {
            e.push(json.to_owned());
        }
    }
    fn token(&self, _step: u32, text: &str) {
        let (client, subject) = (self.client.clone(), format!("treadle.tokens.{}", self.key));
        let text = bytes::Bytes::from(text.to_owned());
        // Live only: a lost delta is lost, as on the local journal's channel.
        tokio::spawn(async move {
            let _ = client.publish(subject, text).await;
        });
    }
}

impl Worker {
    async fn handle(&self, message: async_nats::jetstream::Message) {
        let job: StepJob = match serde_json::from_slice(&message.payload) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!("dropping a step message that does not parse: {e}");
                let _ = message.ack_with(async_nats::jetstream::AckKind::Term).await;
                return;
            }
        };
        let finished = retrying("reading a step's result", || self.bus.done.get(&job.key)).await;
        if finished.is_none() {
            let extend = CancellationToken::new();
            let ticking = tokio::spawn(keep_alive(message.clone(), extend.clone()));
            let outcome = self.leased(&job).await;
            extend.cancel();
            let _ = ticking.await;
            match outcome {
                Leased::Ran(result) => self.store_result(&job.key, &result).await,
                Leased::Busy => {
                    // Its holder is alive: the step comes back later, to whoever is free.
                    let delay = Some(super::lease::LEASE_TIME);
                    let _ = message
                        .ack_with(async_nats::jetstream::AckKind::Nak(delay))
                        .await;
                    return;
                }
                // The delivery is the new holder's now: acknowledging it could end the
                // step while that worker runs it.
                Leased::Lost(why) => {
                    tracing::warn!("step {} is not committed here: {why}", job.key);
                    return;
                }
            }
        }
        // The result is stored: a lost acknowledgement only means a redelivery that is
        // recognised by the key.
        let _ = message.ack().await;
    }

    /// Runs the step, an agent step under its lease (committed into the lease first).
    async fn leased(&self, job: &StepJob) -> Leased {
        if !job.agent {
            return Leased::Ran(Box::new(self.run(job, None).await));
        }
        match lease::acquire(&self.bus, &job.key, &self.name).await {
            Acquired::Finished(result) => Leased::Ran(result),
            Acquired::Busy => Leased::Busy,
            Acquired::Held(lease) => {
                let result = self.run(job, Some(&lease)).await;
                match lease.commit(&result).await {
                    Ok(()) => Leased::Ran(Box::new(result)),
                    Err(why) => Leased::Lost(why.to_string()),
                }
            }
        }
    }

    /// Stores `result` under `key` unless one is there: the first one stands.
    async fn store_result(&self, key: &str, result: &StepResult) {
        let value = bytes::Bytes::from(serde_json::to_vec(result).unwrap_or_default());
        retrying("storing a step's result", || async {
            match self.bus.done.create(key, value.clone()).await {
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
    async fn run(&self, job: &StepJob, lease: Option<&Lease>) -> StepResult {
        let place = self.dir.join("steps").join(&job.key);
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
        lease: Option<&Lease>,
    ) -> Result<StepResult, DistError> {
        let loaded = self.parsed.load(&job.file, &job.job, &job.source)?;
        let job_def = loaded
            .job(Some(&job.job))
            .map_err(|e| DistError::Pipeline(e.to_string()))?;
        let artifacts = Arc::new(
            Artifacts::create(place, job.run).map_err(|e| DistError::Artifact(e.to_string()))?,
        );
        for input in &job.inputs {
            let incoming = artifacts.root().join("incoming").join(&input.name);
            carry::receive(&self.bus, &input.digest, &incoming).await?;
            artifacts
                .adopt(&input.name, &incoming)
                .map_err(|e| DistError::Artifact(e.to_string()))?;
        }
        let sink = Arc::new(Collect {
            events: Mutex::default(),
            client: self.bus.client.clone(),
            key: job.key.clone(),
        });
        // A leased step whose session events were mirrored by an earlier holder goes on
        // from that session.
        let resume = match lease {
            Some(_) => self.adopt(&job.key).await?,
            None => None,
        };
        let secrets = crate::run::redactor(&loaded);
        let transcript = Arc::new(Transcript::new(Style::Quiet, secrets).with_sink(sink.clone()));
        // A leased step stops when its lease is lost.
        let cancel = lease.map_or_else(CancellationToken::new, |l| l.lost().child_token());
        let listening = self.listen_for_cancel(&job.key, cancel.clone()).await;
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
            fence: lease.map(Lease::fence),
            resume,
            questions: job.agent.then(|| {
                let asks = super::asks::Remote::new(self.bus.clone(), &job.key, cancel.clone());
                Questions {
                    asker: asks.clone(),
                    answerer: asks.answerer(),
                }
            }),
        })
        .await
        .map_err(|e| DistError::Pipeline(e.to_string()));
        if let Some(l) = listening {
            l.abort();
        }
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

    /// Rebuilds, in this worker's journal, the session an earlier holder of step `key`
    /// mirrored; the session to restore, if there is one.
    async fn adopt(&self, key: &str) -> Result<Option<SessionId>, DistError> {
        let events = takeover::mirrored(&self.bus, key).await?;
        if events.is_empty() {
            return Ok(None);
        }
        let count = events.len();
        let session = takeover::adopt(self.store.journal(), events).await?;
        if let Some(session) = session {
            tracing::warn!(
                "step {key}: taken over; restoring session {session} from {count} mirrored events"
            );
        }
        Ok(session)
    }

    /// Cancels `cancel` when the server says to stop the step.
    async fn listen_for_cancel(
        &self,
        key: &str,
        cancel: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let mut sub = self
            .bus
            .client
            .subscribe(format!("treadle.cancel.{key}"))
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
                let _ = message.ack_with(async_nats::jetstream::AckKind::Progress).await;
            }
            () = done.cancelled() => return,
        }
    }
}
