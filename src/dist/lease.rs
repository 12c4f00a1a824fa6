//! One writer per agent session: the worker that runs an agent step holds the step's
//! session through a lease in the `treadle-leases` bucket, under the attempt id
//! (`super::attempt_id`).
//!
//! * The first worker to take the step makes the lease with `create` (only when no value is
//!   there); its holder renews it every [`RENEW_EVERY`] with `update` at the revision it
//!   last wrote (compare-and-set), so a renewal fails once anyone else wrote the key.
//! * Each take of the step writes its own mark beside the worker's name: a worker handed
//!   the step again while it still runs it (its message redelivered to it after an outage
//!   that outlasted the ack wait) is another contender, not the holder, and finds the lease
//!   renewed. Only this take's own writes whose answers were lost are recognised as its own.
//! * A worker handed the same step again (its holder stopped extending the delivery) takes
//!   the lease over only after seeing its revision unchanged for [`LEASE_TIME`] by its own
//!   clock while the bucket takes writes (probed with an update that cannot match: after
//!   an outage replicas answer reads before the leader takes the holder's writes), and then
//!   only with `update` at that revision. No clocks are compared across
//!   machines: only how long each side waits on its own.
//! * The holder trusts its lease for [`TRUST_FOR`] after sending the renewal that last
//!   succeeded, well under [`LEASE_TIME`], so it stops before anyone can take over. While the
//!   lease is in doubt (that time passed, a renewal not yet answered) its session's appends
//!   wait; once a renewal is refused (revision moved) they are refused
//!   (`treadle_session::WriteFence`), the step is cancelled, and its result is not committed.
//! * The step is committed by writing its result into the lease with `update` at the
//!   holder's revision: a worker that lost the lease cannot commit. Whoever then finds a
//!   result in the lease (the holder, or a worker the step is redelivered to after the
//!   holder died before acknowledging) copies it to `treadle-done`, where the server reads it.
//! * The fence also mirrors each event the session journals ([`super::takeover`]), so that
//!   a worker taking the step over restores the session; an event that cannot be mirrored
//!   is retried until it is, or until the lease is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use treadle_session::Refused;

use super::bus::{ACK_WAIT, Bus, retrying};
use super::wire::StepResult;

/// How long a contender waits, seeing the same revision, before it takes a lease over.
pub const LEASE_TIME: Duration = ACK_WAIT;
/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long the holder trusts its lease after sending the renewal that succeeded.
pub const TRUST_FOR: Duration = Duration::from_secs(3);

/// What the lease's key holds.
#[derive(Serialize, Deserialize)]
struct Value {
    /// The worker holding it.
    holder: String,
    /// Which of that worker's takes of the step holds it ([`Taker`]).
    #[serde(default)]
    take: u64,
    /// The step's result, once committed.
    #[serde(default)]
    result: Option<StepResult>,
}

/// Who writes a lease: a worker, in one take of the step. A worker's name alone does not
/// tell its takes apart, and a copy of the step's message redelivered to the worker that
/// runs it must not take that run's lease for its own (it would run the step again).
#[derive(Clone)]
struct Taker {
    holder: String,
    take: u64,
}

/// Numbers this process's takes (0: a value written without a take mark).
static TAKES: AtomicU64 = AtomicU64::new(1);

impl Taker {
    fn new(holder: &str) -> Self {
        Self {
            holder: holder.to_owned(),
            take: TAKES.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The value this take writes: the lease, with `result` once committed.
    fn value(&self, result: Option<StepResult>) -> bytes::Bytes {
        encode(&Value {
            holder: self.holder.clone(),
            take: self.take,
            result,
        })
    }

    /// Whether `value` was written by this take.
    fn wrote(&self, value: &Value) -> bool {
        value.holder == self.holder && value.take == self.take
    }
}

fn encode(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// The worker named in a lease's stored value, when it is one: who took the step (the
/// server's view of a queued step, [`super::dispatch`]).
pub fn holder(bytes: &[u8]) -> Option<String> {
    let value = serde_json::from_slice::<Value>(bytes).ok()?;
    Some(value.holder).filter(|h| !h.is_empty())
}

/// How taking a step's lease went.
pub enum Acquired {
    /// This worker holds it now.
    Held(Box<Lease>),
    /// Its holder committed a result: the step is over.
    Finished(Box<StepResult>),
    /// Another worker holds it and is renewing it: the step is not this worker's.
    Busy,
}

/// Where the holder stands.
#[derive(Debug, Clone)]
enum Standing {
    /// Trusted until then.
    Until(Instant),
    /// Lost, for this reason.
    Lost(LeaseLost),
}

/// Why a worker no longer holds a step's lease: its result must not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    /// Another worker took the lease over.
    #[error("another worker took over the step's lease")]
    TakenOver,
    /// The renewer stopped without a verdict.
    #[error("the step's lease is no longer renewed")]
    NotRenewed,
    /// The lease's key is gone: NATS lost the leases bucket's data (a node's store lost).
    #[error(
        "the step's lease vanished from NATS (the leases bucket lost its data: a node's store lost?); the step goes to a worker again"
    )]
    Vanished,
}

#[derive(Debug, Clone)]
struct State {
    /// The revision the holder last wrote.
    revision: u64,
    standing: Standing,
}

/// A held lease, renewed until [`Lease::commit`] or drop.
pub struct Lease {
    store: kv::Store,
    /// Where the session's events are mirrored.
    js: async_nats::jetstream::Context,
    key: String,
    taker: Taker,
    state: watch::Receiver<State>,
    /// Cancelled when the lease is lost.
    lost: CancellationToken,
    stop: CancellationToken,
    renewing: Option<tokio::task::JoinHandle<()>>,
}

/// Takes the lease of attempt `key` (its id) for `holder` (see the module's doc).
pub async fn acquire(bus: &Bus, key: &str, holder: &str) -> Acquired {
    let store = bus.leases.clone();
    let taker = Taker::new(holder);
    let start = |revision, sent| Lease::start(&store, &bus.js, key, &taker, revision, sent);
    let mine = taker.value(None);
    // The revision seen and when it was first seen; when this worker last wrote.
    let mut seen: Option<(u64, Instant)> = None;
    let mut sent = Instant::now();
    loop {
        let entry = retrying("reading a step's lease", || store.entry(key)).await;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            sent = Instant::now();
            match store.create(key, mine.clone()).await {
                Ok(revision) => {
                    return Acquired::Held(Box::new(start(revision, sent)));
                }
                // Someone made it first, or our create landed unanswered: read again.
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => continue,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        };
        if let Ok(value) = serde_json::from_slice::<Value>(&entry.value) {
            if let Some(result) = value.result {
                return Acquired::Finished(Box::new(result));
            }
            // This take's own write whose answer was lost (not another take of this
            // worker's: that one runs the step).
            if taker.wrote(&value) {
                return Acquired::Held(Box::new(start(entry.revision, sent)));
            }
        }
        match seen {
            // The holder's silence counts only while the bucket takes writes: after an
            // outage a replica may answer reads before the stream's leader takes the
            // holder's renewal or commit.
            Some((revision, _)) if revision == entry.revision && !writable(&store, key).await => {
                seen = Some((revision, Instant::now()));
            }
            Some((revision, since)) if revision == entry.revision => {
                if since.elapsed() >= LEASE_TIME {
                    sent = Instant::now();
                    match store.update(key, mine.clone(), revision).await {
                        Ok(new) => {
                            return Acquired::Held(Box::new(start(new, sent)));
                        }
                        // Renewed, taken, or landed unanswered: reading again tells.
                        Err(_) => continue,
                    }
                }
            }
            // Renewed since: its holder is alive.
            Some(_) => return Acquired::Busy,
            None => seen = Some((entry.revision, Instant::now())),
        }
        tokio::time::sleep(RENEW_EVERY / 2).await;
    }
}

/// Whether the bucket's stream takes writes now: an update at a revision the key can never
/// have is refused for that reason only by a leader that checked it (nothing is written).
async fn writable(store: &kv::Store, key: &str) -> bool {
    let probe = store.update(key, bytes::Bytes::new(), u64::MAX).await;
    matches!(probe, Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision)
}

impl Lease {
    fn start(
        store: &kv::Store,
        js: &async_nats::jetstream::Context,
        key: &str,
        taker: &Taker,
        revision: u64,
        sent: Instant,
    ) -> Self {
        let (tx, state) = watch::channel(State {
            revision,
            standing: Standing::Until(sent + TRUST_FOR),
        });
        let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
        let renewer = Renewer {
            store: store.clone(),
            key: key.to_owned(),
            taker: taker.clone(),
            state: tx,
            lost: lost.clone(),
            stop: stop.clone(),
        };
        Self {
            store: store.clone(),
            js: js.clone(),
            key: key.to_owned(),
            taker: taker.clone(),
            state,
            lost,
            stop,
            renewing: Some(tokio::spawn(renewer.run())),
        }
    }

    /// Cancelled when the lease is lost: the step's cancellation hangs from it.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// The fence of the step's session: appends go ahead while the lease is trusted, wait
    /// while it is in doubt, and are refused once it is lost.
    pub fn fence(&self) -> Arc<dyn treadle_session::WriteFence> {
        Arc::new(LeaseFence {
            key: self.key.clone(),
            state: self.state.clone(),
            js: self.js.clone(),
        })
    }

    /// Commits the step: its result into the lease, at the holder's revision. `Err` (why)
    /// when the lease was lost: the result must not be used.
    pub async fn commit(mut self, result: &StepResult) -> Result<(), LeaseLost> {
        // The renewer finishes the renewal it may be sending, so its revision is known.
        self.stop.cancel();
        if let Some(task) = self.renewing.take() {
            let _ = task.await;
        }
        let state = self.state.borrow().clone();
        if let Standing::Lost(why) = state.standing {
            return Err(why);
        }
        let value = self.taker.value(Some(result.clone()));
        let mut revision = state.revision;
        loop {
            match self.store.update(&self.key, value.clone(), revision).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    // A write of ours that landed though its answer was lost (the client
                    // sends what it buffered during an outage once NATS is back): our
                    // commit (done), or a renewal (commit at its revision); else another
                    // worker's lease.
                    let now =
                        retrying("reading a step's lease", || self.store.entry(&self.key)).await;
                    let Some(now) = now.filter(|e| e.operation == kv::Operation::Put) else {
                        return Err(LeaseLost::Vanished);
                    };
                    match serde_json::from_slice::<Value>(&now.value) {
                        Ok(v) if self.taker.wrote(&v) && v.result.is_some() => return Ok(()),
                        Ok(v) if self.taker.wrote(&v) => revision = now.revision,
                        _ => return Err(LeaseLost::TakenOver),
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "committing step {}: {e}; retrying until NATS answers",
                        self.key
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

impl Lease {
    /// Gives the lease up without a result (the worker hands the step back): the next
    /// worker takes the step at once instead of waiting out [`LEASE_TIME`]. Only a lease
    /// still at this holder's revision is deleted.
    pub async fn release(mut self) {
        self.stop.cancel();
        if let Some(task) = self.renewing.take() {
            let _ = task.await;
        }
        let state = self.state.borrow().clone();
        if let Standing::Until(_) = state.standing {
            let _ = self
                .store
                .delete_expect_revision(&self.key, Some(state.revision))
                .await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Renews a lease every [`RENEW_EVERY`] until stopped or lost.
struct Renewer {
    store: kv::Store,
    key: String,
    taker: Taker,
    state: watch::Sender<State>,
    lost: CancellationToken,
    stop: CancellationToken,
}

impl Renewer {
    async fn run(self) {
        let mine = self.taker.value(None);
        loop {
            tokio::select! {
                () = tokio::time::sleep(RENEW_EVERY) => {}
                () = self.stop.cancelled() => return,
            }
            let revision = self.state.borrow().revision;
            let sent = Instant::now();
            match self.store.update(&self.key, mine.clone(), revision).await {
                Ok(new) => {
                    self.state.send_replace(State {
                        revision: new,
                        standing: Standing::Until(sent + TRUST_FOR),
                    });
                }
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    let why = match self.still_mine().await {
                        Ok(revision) => {
                            self.state.send_replace(State {
                                revision,
                                standing: Standing::Until(sent + TRUST_FOR),
                            });
                            continue;
                        }
                        Err(why) => why,
                    };
                    tracing::warn!(
                        "step {}: {why}; its session's writes are refused and its result will not be committed",
                        self.key,
                    );
                    self.state.send_modify(|s| s.standing = Standing::Lost(why));
                    self.lost.cancel();
                    return;
                }
                // NATS is away: the lease is in doubt until a renewal is answered; waiters
                // look at the clock again.
                Err(_) => self.state.send_modify(|_| {}),
            }
        }
    }

    /// The revision of the key when this holder wrote it last (an update that landed
    /// though its answer was lost); why the lease is lost otherwise.
    async fn still_mine(&self) -> Result<u64, LeaseLost> {
        let entry = retrying("reading a step's lease", || self.store.entry(&self.key)).await;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Err(LeaseLost::Vanished);
        };
        let value =
            serde_json::from_slice::<Value>(&entry.value).map_err(|_| LeaseLost::TakenOver)?;
        match self.taker.wrote(&value) && value.result.is_none() {
            true => Ok(entry.revision),
            false => Err(LeaseLost::TakenOver),
        }
    }
}

/// The write fence of a leased step's session.
struct LeaseFence {
    key: String,
    state: watch::Receiver<State>,
    js: async_nats::jetstream::Context,
}

impl std::fmt::Debug for LeaseFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeaseFence({})", self.key)
    }
}

#[async_trait::async_trait]
impl treadle_session::WriteFence for LeaseFence {
    async fn admit(&self) -> Result<(), Refused> {
        let mut state = self.state.clone();
        loop {
            match &state.borrow_and_update().standing {
                Standing::Lost(why) => return Err(Refused(why.to_string())),
                Standing::Until(t) if Instant::now() < *t => return Ok(()),
                Standing::Until(_) => {}
            }
            // In doubt: the renewer's next answer decides.
            if let Ok(Err(_)) = tokio::time::timeout(RENEW_EVERY, state.changed()).await {
                return Err(Refused(LeaseLost::NotRenewed.to_string()));
            }
        }
    }

    /// Mirrors the event before the session acts on it; through NATS outages, until the
    /// lease is lost.
    async fn committed(&self, event: &treadle_session::event::Event) -> Result<(), Refused> {
        let mut said = false;
        loop {
            if let Standing::Lost(why) = &self.state.borrow().standing {
                return Err(Refused(why.to_string()));
            }
            match super::takeover::publish(&self.js, &self.key, event).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if !said {
                        tracing::warn!(
                            "step {}: mirroring a session event: {e}; retrying until NATS answers",
                            self.key
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}
