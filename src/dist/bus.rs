//! The connection to NATS and the JetStream streams, buckets and subjects treadle uses,
//! made on first use by whichever process (server or worker) comes first.
//!
//! * `TREADLE_STEPS` (subject `treadle.steps`): a work-queue stream; each message is one
//!   attempt of one step ([`super::wire::StepJob`]); the durable pull consumer `workers` hands
//!   each to one worker at a time and hands it out again after [`ACK_WAIT`] without an
//!   acknowledgement (or an in-progress extension).
//! * `treadle-done` (key-value): each attempt's result by its step key, written once with
//!   `create` (compare-and-set on "no value yet"): the first result wins, and a redelivered
//!   step whose key has a result is not run again.
//! * `treadle-artifacts` (object store): artifact directories packed ([`super::carry`]), named
//!   by their blake3 digest.
//! * `TREADLE_EVENTS` (subjects `treadle.events.<server>.<run>`): every run's enduring events,
//!   deduplicated by their id (`Nats-Msg-Id`); see [`super::events`].
//! * Plain subjects, not stored: `treadle.cancel.<key>` (stop a step) and
//!   `treadle.tokens.<key>` (an agent step's token deltas).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, object_store, stream};

use super::DistError;

/// The work-queue stream of steps.
pub const STEPS_STREAM: &str = "TREADLE_STEPS";
/// Its subject.
pub const STEPS_SUBJECT: &str = "treadle.steps";
/// The workers' shared durable consumer.
pub const WORKERS: &str = "workers";
/// The results bucket.
pub const DONE_BUCKET: &str = "treadle-done";
/// The artifacts object store.
pub const ARTIFACTS_BUCKET: &str = "treadle-artifacts";
/// The events stream.
pub const EVENTS_STREAM: &str = "TREADLE_EVENTS";
/// How long a delivered step may go without an acknowledgement or an in-progress extension
/// before another worker gets it. Workers extend every third of it.
pub const ACK_WAIT: Duration = Duration::from_secs(6);
/// How long results, artifacts and events are kept.
const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// One process's connection and handles.
#[derive(Clone)]
pub struct Bus {
    /// The core client (plain subjects).
    pub client: async_nats::Client,
    /// JetStream.
    pub js: jetstream::Context,
    /// Results by step key.
    pub done: kv::Store,
    /// Artifacts by digest.
    pub artifacts: object_store::ObjectStore,
}

fn setup(what: &'static str) -> impl FnOnce(String) -> DistError {
    move |why| DistError::Setup { what, why }
}

impl Bus {
    /// Connects (retrying while the server is not up yet) and makes what is missing.
    pub async fn connect(url: &str, name: &str) -> Result<Self, DistError> {
        let client = async_nats::ConnectOptions::new()
            .name(name)
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connect(url)
            .await
            .map_err(|e| DistError::Connect {
                url: url.to_owned(),
                why: e.to_string(),
            })?;
        let js = jetstream::new(client.clone());
        js.get_or_create_stream(stream::Config {
            name: STEPS_STREAM.to_owned(),
            subjects: vec![STEPS_SUBJECT.to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(|e| setup("the steps stream")(e.to_string()))?;
        js.get_or_create_stream(stream::Config {
            name: EVENTS_STREAM.to_owned(),
            subjects: vec!["treadle.events.>".to_owned()],
            duplicate_window: Duration::from_secs(120),
            max_age: KEEP,
            ..Default::default()
        })
        .await
        .map_err(|e| setup("the events stream")(e.to_string()))?;
        // The bucket's stream is made here, as the client's `create_key_value` makes it:
        // that call first reads the account's info, whose shape differs in the NATS 2.9
        // that Debian ships.
        js.get_or_create_stream(stream::Config {
            name: format!("KV_{DONE_BUCKET}"),
            subjects: vec![format!("$KV.{DONE_BUCKET}.>")],
            max_messages_per_subject: 1,
            max_age: KEEP,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(|e| setup("the results bucket")(e.to_string()))?;
        let done = js
            .get_key_value(DONE_BUCKET)
            .await
            .map_err(|e| setup("the results bucket")(e.to_string()))?;
        let artifacts = match js.get_object_store(ARTIFACTS_BUCKET).await {
            Ok(store) => store,
            Err(_) => js
                .create_object_store(object_store::Config {
                    bucket: ARTIFACTS_BUCKET.to_owned(),
                    max_age: KEEP,
                    ..Default::default()
                })
                .await
                .map_err(|e| setup("the artifacts store")(e.to_string()))?,
        };
        Ok(Self {
            client,
            js,
            done,
            artifacts,
        })
    }

    /// The workers' consumer of the steps stream.
    pub async fn workers(&self) -> Result<consumer::PullConsumer, DistError> {
        let stream = self
            .js
            .get_stream(STEPS_STREAM)
            .await
            .map_err(|e| setup("the steps stream")(e.to_string()))?;
        stream
            .get_or_create_consumer(
                WORKERS,
                consumer::pull::Config {
                    durable_name: Some(WORKERS.to_owned()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    max_ack_pending: 100_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| setup("the workers' consumer")(e.to_string()))
    }
}

/// Runs `op` until it succeeds, waiting longer between tries (up to a second): NATS being
/// away (restarting) pauses the caller instead of failing the run.
pub async fn retrying<T, E, F, Fut>(what: &str, mut op: F) -> T
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut wait = Duration::from_millis(20);
    let mut said = false;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                if !said {
                    tracing::warn!("{what}: {e}; retrying until NATS answers");
                    said = true;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        }
    }
}
