//! `treadle watch`: a poller checks every resource a `get` with `trigger: true` fetches and
//! queues the jobs whose inputs moved; workers claim queued builds and run them with the
//! executor. It runs on its own (`treadle watch FILE`) and inside `treadle serve` for the
//! files it serves. See docs/watch.md.
//!
//! # Layout
//!
//! * `watched.rs`: what the watcher reads of a pipeline, and the rule deciding a job's next
//!   inputs (`trigger:`, `passed:`);
//! * `check.rs`: checking one resource, through the resources' `Checker` (the watcher's
//!   one interface to resource types);
//! * `store.rs`: the queue, the last queued inputs, finished builds and job standings in
//!   the state file;
//! * `poll.rs`: the poll rounds and queueing;
//! * `worker.rs`: claiming within the limits and running builds;
//! * `webhooks.rs`: `POST /hooks/check/{resource}`, the webhook that asks for a check now;
//! * `control.rs`: `treadle jobs resume` while a watcher holds the state file.

pub mod check;
pub mod control;
pub mod poll;
pub mod store;
pub mod watched;
pub mod webhooks;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::resource::check::Checker;
use crate::run::event_log::EventLog;
use crate::run::{AgentRunner, Store, Style};
pub use watched::Watched;
pub use worker::Stops;

/// What the process running the watcher does when a build begins and ends (`treadle
/// serve` lists it as a live run; `treadle watch` does nothing more).
pub trait BuildObserver: Send + Sync {
    /// Build `run` began; `cancel` stops it.
    fn begun(&self, run: u64, journal: Arc<EventLog>, cancel: CancellationToken);
    /// Build `run` ended.
    fn ended(&self, run: u64);
}

/// Hooks that do nothing.
pub struct NoObserver;

impl BuildObserver for NoObserver {
    fn begun(&self, _: u64, _: Arc<EventLog>, _: CancellationToken) {}
    fn ended(&self, _: u64) {}
}

/// The watcher's shared state: its pipelines, the state file, the latest version of each
/// checked resource, and the builds running now.
pub struct Watcher {
    /// The watched pipelines.
    pub pipelines: Vec<Arc<Watched>>,
    /// Each pipeline's checker (by the same index).
    checkers: Vec<Checker>,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    observer: Arc<dyn BuildObserver>,
    style: Style,
    max_concurrent: usize,
    /// The latest version of each checked resource, by (pipeline index, resource).
    latest: Mutex<HashMap<(usize, String), String>>,
    /// What was last said of each waiting job (said again only when it changes).
    waiting: Mutex<HashMap<(String, String), String>>,
    in_flight: Mutex<worker::InFlight>,
    /// Tells the workers that something was queued or freed.
    wake: Notify,
    hook_tx: mpsc::UnboundedSender<poll::CheckNow>,
    hook_rx: Mutex<Option<mpsc::UnboundedReceiver<poll::CheckNow>>>,
}

/// How to watch.
pub struct WatchConfig {
    /// Builds at once over all jobs (`--max-concurrent`).
    pub max_concurrent: usize,
    /// How builds' transcripts are printed.
    pub style: Style,
    /// Runs agent steps.
    pub agents: Arc<dyn AgentRunner>,
    /// Told of each build's begin and end.
    pub observer: Arc<dyn BuildObserver>,
}

impl Watcher {
    /// A watcher of `pipelines` on an open state file; rows left claimed by a process
    /// that died are claimable again.
    pub fn new(
        pipelines: Vec<Watched>,
        store: Arc<Store>,
        config: WatchConfig,
    ) -> Result<Arc<Self>, crate::run::StateError> {
        let db = store.database();
        store::ensure(&db)?;
        store::unclaim_all(&db)?;
        let scratch = crate::run::start::state_dir(&store)
            .join("watch")
            .join("checks");
        let checkers = pipelines
            .iter()
            .map(|w| Checker::new(&w.loaded, db.clone(), scratch.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| crate::run::StateError::Tables(Box::new(e)))?;
        let (hook_tx, hook_rx) = mpsc::unbounded_channel();
        Ok(Arc::new(Self {
            checkers,
            pipelines: pipelines.into_iter().map(Arc::new).collect(),
            store,
            agents: config.agents,
            observer: config.observer,
            style: config.style,
            max_concurrent: config.max_concurrent.max(1),
            latest: Mutex::default(),
            waiting: Mutex::default(),
            in_flight: Mutex::default(),
            wake: Notify::new(),
            hook_tx,
            hook_rx: Mutex::new(Some(hook_rx)),
        }))
    }

    /// Whether anything is watched (some job has a `trigger: true` get).
    pub fn watches_anything(&self) -> bool {
        self.pipelines.iter().any(|p| !p.jobs.is_empty())
    }

    /// Runs the poller and the workers until `stops.stop`, then waits for the builds
    /// (`stops.force` cancels those that are not `interruptible:`).
    pub async fn run(self: Arc<Self>, interval: std::time::Duration, stops: Stops) {
        let poller = tokio::spawn(self.clone().poll(interval, stops.stop.clone()));
        self.work(stops).await;
        let _ = poller.await;
    }
}
