//! A step on the queue, from the server's side: its message published (signed when the
//! server has a key), and watched until a worker takes it. Two things are told rather than
//! waited out in silence:
//!
//! * a step no worker took within the server's `--unclaimed-warning` (default
//!   [`UNCLAIMED_WARNING`]) is logged, with the workers seen;
//! * a step whose message is gone from the steps stream while no worker holds its lease and
//!   no result is stored was lost by NATS (the stream came back empty: its node's store
//!   lost): the streams are made again and the step is queued again from the server's own
//!   copy, up to [`REQUEUES`] times; then the step fails naming what was lost.
//!
//! The order of the checks matters: a worker makes the lease before it runs the step and
//! acknowledges the message (removing it from the work queue) only after the result is
//! stored, so reading the lease, then the message, then the result never sees a step in
//! the middle as lost.

use std::time::{Duration, Instant};

use async_nats::jetstream::kv;

use super::bus::{Bus, STEPS_STREAM, STEPS_SUBJECT, retrying};
use super::seen::Seen;
use super::sign::{HEADER, SigningKey};

/// How often a queued step is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(5);
/// How long a step may wait for a worker before the wait is logged, unless the server is
/// told otherwise (`--unclaimed-warning`).
pub const UNCLAIMED_WARNING: Duration = Duration::from_secs(60);
/// How many times a lost step is queued again before it fails.
const REQUEUES: u32 = 3;

/// One step's message and where it goes.
pub struct Queued<'a> {
    /// The connection.
    pub bus: &'a Bus,
    /// The attempt's id.
    pub attempt_id: &'a super::attempt_id::AttemptId,
    /// The step message.
    pub payload: &'a bytes::Bytes,
    /// The server's signing key.
    pub signing: Option<&'a SigningKey>,
    /// The step's name, for the logs.
    pub step: &'a str,
    /// Its run.
    pub run: u64,
    /// The workers heard from.
    pub seen: &'a Seen,
    /// How long it may wait for a worker before the wait is logged.
    pub warn_after: Duration,
}

impl Queued<'_> {
    /// Publishes the message with de-duplication id `id`, through NATS outages; its
    /// sequence in the steps stream.
    pub async fn publish(&self, id: &str) -> u64 {
        retrying("queueing a step", || async {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(key) = self.signing {
                headers.insert(HEADER, key.sign(self.payload).as_str());
            }
            let publish = async_nats::jetstream::message::PublishMessage::build()
                .payload(self.payload.clone())
                .headers(headers)
                .message_id(id);
            let sent = async {
                self.bus
                    .js
                    .send_publish(STEPS_SUBJECT, publish)
                    .await
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| e.to_string())
            };
            let sent = sent.await;
            if sent.is_err() {
                // The stream may be gone (a store lost): made again for the next try.
                let _ = self.bus.ensure().await;
            }
            sent
        })
        .await
        .sequence
    }

    /// Watches the step until a worker takes it (and for ever after, harmlessly); returns
    /// only when the step is lost for good, with why.
    pub async fn watch(&self, mut seq: u64) -> String {
        let since = Instant::now();
        let mut warn_at = Some(since + self.warn_after);
        let mut requeued = 0;
        let mut next_look = since + WATCH_EVERY;
        loop {
            // The warning is due at its own time, not at the next look.
            let wake = warn_at.map_or(next_look, |w| w.min(next_look));
            tokio::time::sleep_until(wake.into()).await;
            if warn_at.is_some_and(|w| Instant::now() >= w) {
                warn_at = None;
                if !self.taken().await {
                    self.warn_unclaimed(since.elapsed());
                }
            }
            if Instant::now() < next_look {
                continue;
            }
            next_look = Instant::now() + WATCH_EVERY;
            if self.taken().await || !self.lost(seq).await {
                continue;
            }
            if requeued == REQUEUES {
                return format!(
                    "step `{}` was lost by NATS {} times: its message vanished from the {STEPS_STREAM} stream with no worker holding it and no result stored (the stream came back empty: a NATS node's store lost?; or every worker refused it: do the servers and workers share the signing key?)",
                    self.step,
                    REQUEUES + 1
                );
            }
            requeued += 1;
            tracing::error!(
                "run {}: step `{}` was lost by NATS (its message vanished from the {STEPS_STREAM} stream: a node's store lost?); queueing it again ({requeued} of {REQUEUES})",
                self.run,
                self.step
            );
            seq = self
                .publish(&format!("{}.requeued.{requeued}", self.attempt_id))
                .await;
        }
    }

    /// Logs that the step has waited `waited` for a worker, and why it may be: the workers
    /// heard from, each with its free slots.
    fn warn_unclaimed(&self, waited: Duration) {
        let workers = self.seen.alive();
        let why = match workers.len() {
            0 => "no `treadle worker` has been heard from on this NATS (start one: `treadle worker --nats URL`)".to_owned(),
            n => {
                let each: Vec<String> = workers
                    .iter()
                    .map(|w| {
                        let free = w.slots - w.running.min(w.slots);
                        format!("{} {free} of {} slots free", w.name, w.slots)
                    })
                    .collect();
                format!("{n} worker(s) seen: {}", each.join(", "))
            }
        };
        tracing::warn!(
            "run {}: step `{}` has waited {} for a worker: {why}",
            self.run,
            self.step,
            crate::pipeline::duration::format_duration(waited)
        );
    }

    /// Whether a worker holds (or held) the step's lease, or its result is stored.
    async fn taken(&self) -> bool {
        let leased = self.bus.leases.entry(self.attempt_id.as_str()).await;
        matches!(leased, Ok(Some(e)) if e.operation == kv::Operation::Put)
    }

    /// Whether the step's message is gone while nobody holds it and no result is stored.
    async fn lost(&self, seq: u64) -> bool {
        use async_nats::jetstream::ErrorCode;
        use async_nats::jetstream::context::GetStreamErrorKind as S;
        use async_nats::jetstream::stream::LastRawMessageErrorKind as M;
        // Only "no such message" or "no such stream" says it is gone; anything else (NATS
        // away) is looked at again later.
        let gone = match self.bus.js.get_stream(STEPS_STREAM).await {
            Ok(stream) => match stream.get_raw_message(seq).await {
                Ok(_) => false,
                Err(e) => match e.kind() {
                    M::NoMessageFound => true,
                    M::JetStream(j) => j.error_code() == ErrorCode::NO_MESSAGE_FOUND,
                    _ => false,
                },
            },
            Err(e) => {
                matches!(e.kind(), S::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
            }
        };
        if !gone {
            return false;
        }
        // The buckets may have been lost with the stream: made again before they are read.
        if let Err(e) = self.bus.ensure().await {
            tracing::warn!("making the streams and buckets again: {e}");
            return false;
        }
        !self.taken().await && matches!(self.bus.done.get(self.attempt_id.as_str()).await, Ok(None))
    }
}
