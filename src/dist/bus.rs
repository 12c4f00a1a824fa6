//! The connection to NATS and the JetStream streams, buckets and subjects treadle uses,
//! made on first use by whichever process (server or worker) comes first.
//!
//! * `TREADLE_STEPS` (subject `treadle.steps`): a work-queue stream; each message is one
//!   attempt of one step ([`super::wire::StepJob`]); the durable pull consumer `workers` hands
//!   each to one worker at a time and hands it out again after [`ACK_WAIT`] without an
//!   acknowledgement (or an in-progress extension).
//! * `treadle-done` (key-value): each attempt's result by its attempt id (`super::attempt_id`), written once with
//!   `create` (compare-and-set on "no value yet"): the first result wins, and a redelivered
//!   step whose key has a result is not run again.
//! * `treadle-leases` (key-value): which worker holds an agent step's session, by attempt id,
//!   renewed with revision-checked updates ([`super::lease`]).
//! * `treadle-cache` (key-value): step cache records by cache key, shared by every server
//!   ([`super::shared_cache`]).
//! * `treadle-asks` (key-value): an agent step's questions for a person, asked by its worker
//!   under `<attempt id>.<n>` and answered there by the server ([`super::asks`]).
//! * `treadle-artifacts` (object store): artifact directories packed ([`super::carry`]), named
//!   by their blake3 digest.
//! * `TREADLE_EVENTS` (subjects `treadle.events.<server>.<run>`): every run's enduring events,
//!   deduplicated by their id (`Nats-Msg-Id`); see [`super::events`].
//! * Plain subjects, not stored: `treadle.cancel.<attempt id>` (stop a step) and
//!   `treadle.tokens.<attempt id>` (an agent step's token deltas).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, object_store, stream};

use super::DistError;
use super::connect::NatsConfig;

/// The work-queue stream of steps.
pub const STEPS_STREAM: &str = "TREADLE_STEPS";
/// Its subject.
pub const STEPS_SUBJECT: &str = "treadle.steps";
/// The workers' shared durable consumer.
pub const WORKERS: &str = "workers";
/// The results bucket.
pub const DONE_BUCKET: &str = "treadle-done";
/// The leases bucket.
pub const LEASES_BUCKET: &str = "treadle-leases";
/// The shared step cache bucket.
pub const CACHE_BUCKET: &str = "treadle-cache";
/// The questions bucket.
pub const ASKS_BUCKET: &str = "treadle-asks";
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
    /// Results by attempt id.
    pub done: kv::Store,
    /// Agent steps' session leases by attempt id ([`super::lease`]).
    pub leases: kv::Store,
    /// Cache records by cache key ([`super::shared_cache`]).
    pub cache: kv::Store,
    /// Agent steps' questions for a person and their answers ([`super::asks`]).
    pub asks: kv::Store,
    /// Artifacts by digest.
    pub artifacts: object_store::ObjectStore,
    /// The replica count of each stream and bucket.
    pub replicas: usize,
}

fn setup(what: &'static str) -> impl FnOnce(String) -> DistError {
    move |why| DistError::Setup { what, why }
}

/// How long start-up waits for JetStream to answer (a cluster electing its leaders) before
/// reporting why it cannot set up.
const JETSTREAM_WAIT: Duration = Duration::from_secs(30);

impl Bus {
    /// Connects (waiting while no NATS server answers yet, and saying so) and makes what is
    /// missing, each stream and bucket with `config`'s replica count (see
    /// [`super::connect::replicas`]).
    pub async fn connect(config: &NatsConfig, name: &str) -> Result<Self, DistError> {
        let client = config.connect(name).await?;
        let replicas = super::connect::replicas(config.replicas, &client.server_info());
        let js = jetstream::new(client.clone());
        let started = std::time::Instant::now();
        let mut said = false;
        let made = loop {
            match make(&js, replicas).await {
                Ok(made) => break made,
                // A refusal (replicas a single server cannot keep, an R1 stream that
                // cannot be raised) is not waited out.
                Err(e @ DistError::Replicas { .. }) => return Err(e),
                Err(e) if started.elapsed() >= JETSTREAM_WAIT => {
                    return Err(DistError::JetStream(Box::new(e)));
                }
                Err(e) => {
                    if !said {
                        crate::console::tell!(
                            "{name}: waiting for JetStream at {} ({e})",
                            config.shown()
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let (done, leases, cache, asks, artifacts) = made;
        Ok(Self {
            client,
            js,
            done,
            leases,
            cache,
            asks,
            artifacts,
            replicas,
        })
    }

    /// Makes again whatever is missing (a stream that came back empty after its node's
    /// store was lost is recreated here), at this bus's replica count.
    pub async fn ensure(&self) -> Result<(), DistError> {
        make(&self.js, self.replicas).await.map(|_| ())
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
                    num_replicas: self.replicas,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| setup("the workers' consumer")(e.to_string()))
    }
}

type Made = (
    kv::Store,
    kv::Store,
    kv::Store,
    kv::Store,
    object_store::ObjectStore,
);

/// Makes (or opens) every stream, bucket and object store, each with `replicas`.
async fn make(js: &jetstream::Context, replicas: usize) -> Result<Made, DistError> {
    stream_with(
        js,
        stream::Config {
            name: STEPS_STREAM.to_owned(),
            subjects: vec![STEPS_SUBJECT.to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        },
        replicas,
        "the steps stream",
    )
    .await?;
    stream_with(
        js,
        stream::Config {
            name: EVENTS_STREAM.to_owned(),
            subjects: vec!["treadle.events.>".to_owned()],
            duplicate_window: Duration::from_secs(120),
            max_age: KEEP,
            ..Default::default()
        },
        replicas,
        "the events stream",
    )
    .await?;
    let done = bucket(js, DONE_BUCKET, replicas, "the results bucket").await?;
    let leases = bucket(js, LEASES_BUCKET, replicas, "the leases bucket").await?;
    let cache = bucket(js, CACHE_BUCKET, replicas, "the shared cache bucket").await?;
    let asks = bucket(js, ASKS_BUCKET, replicas, "the questions bucket").await?;
    let artifacts = match js.get_object_store(ARTIFACTS_BUCKET).await {
        Ok(store) => store,
        Err(_) => js
            .create_object_store(object_store::Config {
                bucket: ARTIFACTS_BUCKET.to_owned(),
                max_age: KEEP,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| refused(replicas, "the artifacts store", e.to_string()))?,
    };
    raise(
        js,
        &format!("OBJ_{ARTIFACTS_BUCKET}"),
        replicas,
        "the artifacts store",
    )
    .await?;
    Ok((done, leases, cache, asks, artifacts))
}

/// The error for a stream that cannot be made: a replica count the server cannot keep is
/// a refusal to report, anything else may pass (JetStream still starting).
fn refused(replicas: usize, what: &'static str, why: String) -> DistError {
    let lower = why.to_lowercase();
    if replicas > 1 && (lower.contains("replicas") || lower.contains("insufficient resources")) {
        return DistError::Replicas {
            what,
            why: format!(
                "{why}\nhint: {replicas} replicas need a JetStream cluster of at least {replicas} servers; pass --nats-replicas 1 for a single server"
            ),
        };
    }
    setup(what)(why)
}

/// Makes (or opens) the stream `config` with `replicas`, and raises an existing one that
/// has fewer.
async fn stream_with(
    js: &jetstream::Context,
    config: stream::Config,
    replicas: usize,
    what: &'static str,
) -> Result<(), DistError> {
    let name = config.name.clone();
    js.get_or_create_stream(stream::Config {
        num_replicas: replicas,
        ..config
    })
    .await
    .map_err(|e| refused(replicas, what, e.to_string()))?;
    raise(js, &name, replicas, what).await
}

/// Raises the stream `name` to `replicas` when it has fewer (made by an older treadle, or
/// by a process that saw a smaller cluster); one with more is left as it is.
async fn raise(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    what: &'static str,
) -> Result<(), DistError> {
    let mut stream = js
        .get_stream(name)
        .await
        .map_err(|e| setup(what)(e.to_string()))?;
    let info = stream
        .info()
        .await
        .map_err(|e| setup(what)(e.to_string()))?;
    let have = info.config.num_replicas;
    if have >= replicas {
        return Ok(());
    }
    let raised = stream::Config {
        num_replicas: replicas,
        ..info.config.clone()
    };
    js.update_stream(raised).await.map_err(|e| DistError::Replicas {
        what,
        why: format!(
            "stream {name} has {have} replica(s), {replicas} wanted, and raising it failed: {e}\nhint: raise it with `nats stream edit {name} --replicas {replicas}`, or pass --nats-replicas {have}"
        ),
    })?;
    tracing::warn!("raised stream {name} from {have} to {replicas} replicas");
    Ok(())
}

/// Opens the key-value bucket `name`, making it first when missing (one value per key,
/// kept [`KEEP`]).
async fn bucket(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    what: &'static str,
) -> Result<kv::Store, DistError> {
    // The bucket's stream is made here, as the client's `create_key_value` makes it: that
    // call first reads the account's info, whose shape differs in the NATS 2.9 that
    // Debian ships.
    stream_with(
        js,
        stream::Config {
            name: format!("KV_{name}"),
            subjects: vec![format!("$KV.{name}.>")],
            max_messages_per_subject: 1,
            max_age: KEEP,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        },
        replicas,
        what,
    )
    .await?;
    js.get_key_value(name)
        .await
        .map_err(|e| setup(what)(e.to_string()))
}

/// Waits for the first value under `key` in `store` that `parse` accepts, through NATS
/// restarts.
pub async fn wait_for<T>(store: &kv::Store, key: &str, parse: impl Fn(&[u8]) -> Option<T>) -> T {
    use futures::StreamExt;
    loop {
        let mut watch = retrying("watching a key", || store.watch(key)).await;
        // The watch gives the current value first, when there is one, then each change. A
        // watch whose consumer was lost with a NATS restart may go quiet rather than fail,
        // so the key is also read now and then.
        loop {
            tokio::select! {
                entry = watch.next() => match entry {
                    Some(Ok(entry)) => {
                        if let Some(value) = parse(&entry.value) {
                            return value;
                        }
                    }
                    _ => break,
                },
                () = tokio::time::sleep(Duration::from_secs(2)) => {
                    if let Ok(Some(bytes)) = store.get(key).await
                        && let Some(value) = parse(&bytes)
                    {
                        return value;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
