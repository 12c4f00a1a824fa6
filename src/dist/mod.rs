//! Past one machine: a run's task and agent steps on workers, over NATS JetStream
//! (`treadle serve --nats URL`, `treadle worker --nats URL`). See docs/scale-out.md.
//!
//! Why async-nats: it is the NATS project's own Rust client (maintained by Synadia, the NATS
//! authors), the most used one, and covers JetStream work queues, key-value and object
//! stores in one crate; built here without default features (only the *ring* TLS
//! provider, as the model client uses).
//!
//! The server still walks the plan with the one executor (`run::exec`): guards, attempts,
//! timeouts, hooks, containers, the cache, approvals and the run's record stay there. Only
//! the leaves (tasks and agents) travel, and a worker runs each with the same function the
//! local executor uses (`run::one_leaf`). Nothing here is used without `--nats`.
//!
//! # Layout
//!
//! * `connect.rs`: where NATS is and how to reach it (URLs, credentials, TLS, replicas),
//!   parsed once; the start-up wait;
//! * `sign.rs`: step messages signed with a key the server and its workers share;
//! * `bus.rs`: the connection, the streams, buckets and subjects, retrying through outages;
//! * `wire.rs`: the step and result messages; `attempt_id.rs`: the name of one attempt of
//!   a step on NATS (`AttemptId`, not the step's cache key);
//! * `carry.rs`: artifact directories through the object store, by blake3 digest;
//! * `dispatch.rs`: the server's side: a step to the queue, its result back into the run;
//! * `queued.rs`: a queued step's message, watched until a worker takes it (a long wait
//!   logged, a step NATS lost queued again);
//! * `seen.rs`: workers' beats, and the workers a server heard from;
//! * `stats.rs`: the durations of steps run on workers, for `/metrics`;
//! * `health.rs`: the NATS connection and JetStream's queue as `/health` and `/metrics`
//!   show them;
//! * `worker.rs`: `treadle worker`;
//! * `lease.rs`: one writer per agent session, through a revision-checked lease;
//! * `parsed.rs`: a worker's parsed pipelines, by digest;
//! * `shared_cache.rs`: the step cache shared through a key-value bucket;
//! * `asks.rs`: an agent step's questions for a person, asked on a worker, answered on the
//!   server;
//! * `events.rs`: a run's events mirrored to a JetStream stream, and followed from it;
//! * `takeover.rs`: an agent step's session events mirrored by its worker, and its session
//!   restored from them by a worker that takes the step over.

pub mod asks;
pub mod attempt_id;
pub mod bus;
pub mod carry;
pub mod connect;
pub mod dispatch;
pub mod events;
pub mod health;
pub mod lease;
pub mod parsed;
pub mod queued;
pub mod seen;
pub mod shared_cache;
pub mod sign;
pub mod stats;
pub mod takeover;
pub mod wire;
pub mod worker;

pub use dispatch::{Dispatcher, RemoteRun};
pub use worker::{WorkerOptions, work};

/// What can go wrong talking to NATS or carrying a step.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The NATS server refused the connection (credentials, TLS).
    #[error(
        "cannot connect to NATS at {url}: {why}\nhint: check the credentials (--nats-creds, --nats-nkey, user:password@ or token@ in the URL, NATS_USER/NATS_PASSWORD, NATS_TOKEN) and the TLS options (--nats-ca, --nats-tls-cert, --nats-tls-key)"
    )]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// A stream, bucket, consumer or file cannot be made or opened.
    #[error("cannot set up {what}: {why}")]
    Setup {
        /// Which.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// The NATS server answers, but JetStream did not within the start-up wait.
    #[error(
        "NATS answers but JetStream does not: {0}\nhint: the NATS server must run with JetStream (`nats-server -js`, or `jetstream {{}}` in its config); a cluster needs a majority of its servers up"
    )]
    JetStream(#[source] Box<DistError>),
    /// A stream or bucket cannot have the replica count asked for.
    #[error("cannot set up {what}: {why}")]
    Replicas {
        /// Which.
        what: &'static str,
        /// Why, with how to fix it.
        why: String,
    },
    /// An artifact cannot be packed, fetched or unpacked.
    #[error("artifact: {0}")]
    Artifact(#[from] carry::CarryError),
    /// A worker's run directory cannot be made, or a received input cannot be adopted.
    #[error("artifact: {0}")]
    Workspace(#[from] crate::run::artifacts::ArtifactError),
    /// The session of a step taken over cannot be rebuilt from its mirrored events.
    #[error("taking the step over: {0}")]
    Takeover(#[from] takeover::TakeoverError),
    /// The pipeline the server sent does not load here: its located errors.
    #[error("the step's pipeline does not load on this worker: {0}")]
    Pipeline(#[source] crate::pipeline::LoadError),
    /// The pipeline loads, but has no job of the name the server sent.
    #[error("the step's pipeline does not load on this worker: {0}")]
    NoJob(crate::pipeline::Diagnostic),
    /// The step could not be run here (the pipeline the server sent has no such step, or
    /// not one a worker runs, or a cell's outputs cannot be collected).
    #[error("the step cannot run on this worker: {0}")]
    Step(#[source] crate::run::one_leaf::OneLeafError),
}

impl From<crate::blocking::WorkerStopped> for DistError {
    fn from(stopped: crate::blocking::WorkerStopped) -> Self {
        DistError::Artifact(carry::CarryError::Stopped(stopped))
    }
}

/// An id unlikely to repeat: this process, now, hashed.
pub(crate) fn unique_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!("{}-{now}-{:p}", std::process::id(), &now);
    blake3::hash(seed.as_bytes()).to_hex()[..12].to_owned()
}
