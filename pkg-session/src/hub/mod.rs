//! Fan-out of one session's events to its subscribers.
//!
//! The loop actor publishes every event here: ephemeral ones as they happen, enduring ones
//! only after the journal acknowledged them, in seq order (rule 2). Each subscriber has a
//! bounded queue of its own, so a slow one never slows the publisher or the others.
//!
//! # Delivery guarantees
//!
//! * Every subscriber sees events in publish order: publishing is serialized by one lock,
//!   which is held only for the non-blocking pushes.
//! * A full queue drops an ephemeral event for that subscriber only (counted in
//!   [`Subscription::missed`]). A full queue on an enduring event closes that subscription
//!   with [`SubscriptionLost`], after it has delivered what was queued (rule 8).
//! * [`Hub::subscribe_from`] reads the journal up to the last published seq, marks the end
//!   of that catch-up ([`CatchUpItem::CaughtUp`]), then follows live, with no gap and no
//!   duplicate. Because the catch-up stops at what was published
//!   before the live queue began, a step's deltas (queued live) can never come after that
//!   step's `StepDone` (read from the journal), which keeps rule 3 on resumed subscriptions.
//!
//! # Decisions
//!
//! * A hub starts with the journal's last seq for its session as its last published seq, so
//!   `subscribe_from` on a restored session replays the restored history even before the
//!   first new event is published. If that read fails, the hub logs it, and until the first
//!   enduring publish `subscribe_from` reads the whole journal tail instead, skipping live
//!   duplicates by seq.
//! * An enduring event published without a seq (a caller bug: it should be journaled first)
//!   that overflows a queue reports `resume_from` as the seq after the last published one.
//! * Each subscriber's queue is a mutex-guarded deque that its reader swaps out whole, not a
//!   tokio channel: fan-out is the hot path of a streaming turn. On 2 cores, publishing
//!   distinct `TokenDelta`s to 10 draining subscribers runs at about 1.4 million events/s.

mod catch_up;
mod queue;
mod subscription;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use treadle_event::{Delivery, Event, EventFilter, LoopId, LoopScope, SessionId};
use treadle_hook::{HookCall, HookRunner, OperationOutcome, Payload};

use crate::journal::{AppendError, Journal, ReadError};

/// [`Hub::publish_ephemeral`] was given an enduring event.
#[cfg(test)]
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{0} is an enduring event: it is published by the session after the journal keeps it, \
     never directly"
)]
pub(crate) struct NotEphemeral(pub &'static str);

pub use catch_up::{CatchUp, CatchUpItem};
pub use subscription::{Subscription, SubscriptionLost};

use queue::{Queue, Rejected};

/// How a [`Hub`] queues for its subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubOptions {
    /// Deliveries each subscriber may have waiting (default 4096, at least 1).
    pub queue_capacity: usize,
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            queue_capacity: 4096,
        }
    }
}

/// The event fan-out of one session. Cheap to clone; every clone is the same hub. Private
/// to the crate: only the session's loop actor publishes into it (rule 2); users
/// subscribe through [`crate::Session`].
#[derive(Clone)]
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    session: SessionId,
    journal: Journal,
    /// Called around every journal append (`JournalAppend`); none for a hub made by hand.
    hooks: HookRunner,
    /// The loop a session-wide event's append is reported in (hook calls name a loop).
    main_loop: LoopId,
    /// Asked before every append; none for a hub made by hand or a session without one.
    fence: Option<Arc<dyn crate::fence::WriteFence>>,
    capacity: usize,
    state: Mutex<State>,
}

struct State {
    subscribers: Vec<Subscriber>,
    /// The last enduring seq subscribers can have seen: the journal's last at creation,
    /// then each enduring publish.
    last_seq: Option<u64>,
    /// The journal could not be read at creation, so `last_seq` may be too low.
    seed_unknown: bool,
    closed: bool,
}

struct Subscriber {
    filter: EventFilter,
    queue: Arc<Queue>,
    /// Subscribed through the public API, so someone outside the session may act on what
    /// it sees (answer a gate); the session's own waits (`run`) are not watchers.
    watcher: bool,
}

impl Drop for Subscriber {
    // Whether removed by close, by loss or with the hub, the subscription then ends after
    // what it has queued.
    fn drop(&mut self) {
        self.queue.close(None);
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Hub")
            .field("session", &self.inner.session)
            .field("subscribers", &state.subscribers.len())
            .field("last_seq", &state.last_seq)
            .field("closed", &state.closed)
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub for `session` with default options; `journal` serves catch-up reads.
    #[cfg(test)]
    pub(crate) fn new(session: SessionId, journal: Journal) -> Hub {
        Self::with_options(session, journal, HubOptions::default())
    }

    /// A hub for `session`; `journal` serves catch-up reads.
    #[cfg(test)]
    pub(crate) fn with_options(session: SessionId, journal: Journal, options: HubOptions) -> Hub {
        Self::with_hooks(
            session,
            journal,
            options,
            HookRunner::default(),
            LoopId::new(),
            None,
        )
    }

    /// A session's hub: `hooks` see every journal append it makes, an append of an event
    /// with no loop is reported in `main_loop`, and `fence` (when given) admits each append.
    pub(crate) fn with_hooks(
        session: SessionId,
        journal: Journal,
        options: HubOptions,
        hooks: HookRunner,
        main_loop: LoopId,
        fence: Option<Arc<dyn crate::fence::WriteFence>>,
    ) -> Hub {
        let (last_seq, seed_unknown) = match journal.last_seq(session) {
            Ok(seq) => (seq, false),
            Err(error) => {
                tracing::warn!(%session, %error, "hub cannot read the journal's last seq");
                (None, true)
            }
        };
        Hub {
            inner: Arc::new(Inner {
                session,
                journal,
                hooks,
                main_loop,
                fence,
                capacity: options.queue_capacity.max(1),
                state: Mutex::new(State {
                    subscribers: Vec::new(),
                    last_seq,
                    seed_unknown,
                    closed: false,
                }),
            }),
        }
    }

    /// The session this hub serves.
    pub(crate) fn session(&self) -> SessionId {
        self.inner.session
    }

    /// Rule 2, commit-before-publish, in one function: journals the enduring `event`, waits
    /// for the journal to acknowledge its durable append, and only then publishes it with
    /// its seq. Every enduring event of a session goes through here or through
    /// [`Hub::commit_group`] (see docs/rules.md), so every journal append passes the
    /// `JournalAppend` hooks here too.
    /// An acknowledgement without a seq is an error, never a made-up seq.
    pub(crate) async fn commit(&self, event: Event) -> Result<u64, AppendError> {
        let id = event.id();
        let seqs = self.commit_group(vec![event]).await?;
        seqs.first()
            .copied()
            .ok_or(AppendError::NoSeq { event: id })
    }

    /// [`Hub::commit`] of several enduring events as one atomic append: one journal batch
    /// (one sync) for all of them, then each is published with its seq, in order. A step
    /// commits its last effect's result with its `StepDone` this way.
    pub(crate) async fn commit_group(&self, events: Vec<Event>) -> Result<Vec<u64>, AppendError> {
        // A fence's and the hooks' futures are large and rare. Awaited inline, their room
        // was in every caller's future, among them the loop actor's, which ractor keeps
        // boxed for the session's whole life; boxed, they cost only the sessions that
        // have them (docs/benchmarks.md, the idle session).
        let watched = self.inner.fence.is_some() || !self.inner.hooks.is_empty();
        let hook = if watched {
            Box::pin(self.before_append(&events)).await?
        } else {
            None
        };
        let appended = self.inner.journal.append_all(&events).await;
        let result = appended.and_then(|seqs| match events.get(seqs.len()) {
            // One seq per event, or the acknowledgement is not believed.
            Some(missing) => Err(AppendError::NoSeq {
                event: missing.id(),
            }),
            None => Ok(seqs),
        });
        let seqs = if watched {
            Box::pin(self.after_append(&events, hook, result)).await?
        } else {
            result?
        };
        for (event, &seq) in events.into_iter().zip(&seqs) {
            self.publish(Arc::new(event), Some(seq));
        }
        Ok(seqs)
    }

    /// What a watched append does before it: the fence admits it, and the `JournalAppend`
    /// hooks begin (their operation, boxed for the reason [`Hub::commit_group`] gives).
    async fn before_append(
        &self,
        events: &[Event],
    ) -> Result<Option<Box<treadle_hook::Active>>, AppendError> {
        // A session that lost its right to write (its fence says so) writes nothing more,
        // and its subscriptions end: no terminal event will ever reach them.
        if let Some(fence) = &self.inner.fence
            && let Err(why) = fence.admit().await
        {
            self.close();
            return Err(AppendError::Fenced { why });
        }
        Ok(self.begin_append(events).await.map(Box::new))
    }

    /// What a watched append does after it: the hooks finish with its outcome, and the
    /// fence is told of each event committed.
    async fn after_append(
        &self,
        events: &[Event],
        hook: Option<Box<treadle_hook::Active>>,
        result: Result<Vec<u64>, AppendError>,
    ) -> Result<Vec<u64>, AppendError> {
        if let Some(active) = hook {
            let outcome = match &result {
                Ok(_) => OperationOutcome::Completed,
                Err(error) => OperationOutcome::failed(error.to_string()),
            };
            (*active).finish(outcome, None).await;
        }
        let seqs = result?;
        if let Some(fence) = &self.inner.fence {
            for event in events {
                if let Err(why) = fence.committed(event).await {
                    self.close();
                    return Err(AppendError::Fenced { why });
                }
            }
        }
        Ok(seqs)
    }

    /// Begins the `JournalAppend` operation of an append of `events`, in the coordinates of
    /// the last of them (a group is one step's).
    async fn begin_append(&self, events: &[Event]) -> Option<treadle_hook::Active> {
        if self.inner.hooks.is_empty() {
            return None;
        }
        let header = &events.last()?.header;
        let payload = Payload::JournalAppend {
            events: events.iter().map(|e| e.kind.name().into()).collect(),
        };
        let mut call = HookCall::new(
            self.inner.session,
            header.loop_id.unwrap_or(self.inner.main_loop),
            payload,
        );
        call.turn = header.turn;
        call.step = header.step;
        // Not a guard: a deny is ignored (and logged) by the runner, so this never fails.
        self.inner.hooks.begin(call).await.ok()
    }

    /// Whether a write fence admits this session's appends (a worker holding a lease).
    pub(crate) fn fenced(&self) -> bool {
        self.inner.fence.is_some()
    }

    /// The hooks of this session.
    pub(crate) fn hooks(&self) -> &HookRunner {
        &self.inner.hooks
    }

    /// Publishes an ephemeral event (a token delta, a tool call's start or end) to every
    /// subscriber whose filter admits it. Enduring events are refused: they reach
    /// subscribers only through the session's journal (rule 2).
    #[cfg(test)]
    pub(crate) fn publish_ephemeral(&self, event: Arc<Event>) -> Result<(), NotEphemeral> {
        if event.is_enduring() {
            return Err(NotEphemeral(event.kind.name()));
        }
        self.publish(event, None);
        Ok(())
    }

    /// Delivers `event` to every subscriber whose filter admits it. Never blocks on a
    /// subscriber and never awaits.
    ///
    /// `seq` is the event's journal seq: `Some` for enduring events, which must be
    /// published after the journal acknowledged them and in seq order; `None` for
    /// ephemeral ones. Publishing after [`Hub::close`] does nothing.
    pub(crate) fn publish(&self, event: Arc<Event>, seq: Option<u64>) {
        let enduring = event.is_enduring();
        let mut state = self.state();
        if state.closed {
            return;
        }
        if enduring && let Some(seq) = seq {
            state.last_seq = Some(state.last_seq.map_or(seq, |last| last.max(seq)));
        }
        let resume_from = seq.unwrap_or_else(|| state.last_seq.map_or(1, |last| last + 1));
        state.subscribers.retain(|subscriber| {
            if !subscriber.filter.admits(&event) {
                return true;
            }
            let delivery = Delivery {
                event: Arc::clone(&event),
                journal_seq: seq,
            };
            match subscriber.queue.try_push(delivery) {
                Ok(()) => true,
                Err(Rejected::Full) if !enduring => {
                    subscriber.queue.count_missed();
                    true
                }
                Err(Rejected::Full) => {
                    subscriber.queue.close(Some(resume_from));
                    false
                }
                Err(Rejected::Gone) => false,
            }
        });
    }

    /// Live events from now on, with no replay.
    pub(crate) fn subscribe(&self, filter: EventFilter) -> Subscription {
        self.register(filter, true).0
    }

    /// This session's journaled events with seq ≥ `from_seq` that `filter` admits, then a
    /// [`CatchUpItem::CaughtUp`] mark, then live events, with no gap and no duplicate even
    /// while events are being published.
    pub(crate) fn subscribe_from(
        &self,
        from_seq: u64,
        filter: EventFilter,
    ) -> Result<CatchUp, ReadError> {
        let (subscription, through, seed_unknown) = self.register(filter.clone(), true);
        // Read after the live queue exists, and without the lock: everything up to
        // `through` was published before the queue began, everything after comes through it.
        let (events, through) = match (through, seed_unknown) {
            (Some(through), _) => {
                let events = if from_seq <= through {
                    self.inner
                        .journal
                        .read_range(self.inner.session, from_seq..=through, None)?
                } else {
                    Vec::new()
                };
                (events, through)
            }
            // Nothing published and the journal's tail unknown: read all of it and let the
            // live queue skip what the read already returned.
            (None, true) => {
                let events = self
                    .inner
                    .journal
                    .read(self.inner.session, from_seq, None)?;
                let read_through = events.last().map_or(0, |(seq, _)| *seq);
                (events, read_through)
            }
            (None, false) => (Vec::new(), 0),
        };
        let catch_up: VecDeque<Delivery> = events
            .into_iter()
            .filter(|(_, event)| filter.admits(event))
            .map(|(seq, event)| Delivery {
                event: Arc::new(event),
                journal_seq: Some(seq),
            })
            .collect();
        Ok(CatchUp::new(
            subscription.with_catch_up(catch_up, through),
            through,
        ))
    }

    /// Ends every subscription after what is already queued; later publishes are ignored
    /// and later subscriptions end at once (after their catch-up).
    pub(crate) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.subscribers.clear();
    }

    /// Whether [`Hub::close`] was called.
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// The seq of the last enduring event subscribers can have seen: the last published
    /// one, or, before any, the last one the journal held for this session when the hub
    /// was made.
    #[cfg(test)]
    pub(crate) fn last_published_seq(&self) -> Option<u64> {
        self.state().last_seq
    }

    /// How many subscriptions are live. Dropped ones are noticed on the next publish that
    /// reaches them.
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.state().subscribers.len()
    }

    /// Registers a live subscriber under the publish lock and notes the last seq as of that
    /// moment.
    /// Whether an open subscription made through the public API admits `event`: someone who
    /// could answer a gate it announces.
    pub(crate) fn watched(&self, event: &Event) -> bool {
        self.state()
            .subscribers
            .iter()
            .any(|s| s.watcher && s.filter.admits(event) && s.queue.is_open())
    }

    /// Whether some subscriber takes ephemeral events of `loop_id` (every ephemeral event
    /// is loop-scoped): when none does, the event need not be built at all. A subscriber
    /// that is already gone still counts until the next publish prunes it.
    pub(crate) fn wants_ephemeral(&self, loop_id: Option<LoopId>) -> bool {
        let state = self.state();
        !state.closed
            && state.subscribers.iter().any(|s| match &s.filter.ephemeral {
                LoopScope::All => true,
                LoopScope::None => false,
                LoopScope::Only(loops) => loop_id.is_some_and(|l| loops.contains(&l)),
            })
    }

    /// A live subscription for the session's own use (not a watcher, see [`Hub::watched`]).
    pub(crate) fn subscribe_internal(&self, filter: EventFilter) -> Subscription {
        self.register(filter, false).0
    }

    fn register(&self, filter: EventFilter, watcher: bool) -> (Subscription, Option<u64>, bool) {
        let queue = Arc::new(Queue::new(self.inner.capacity));
        let subscription = Subscription::new(Arc::clone(&queue));
        let mut state = self.state();
        if state.closed {
            queue.close(None);
        } else {
            state.subscribers.push(Subscriber {
                filter,
                queue,
                watcher,
            });
        }
        (subscription, state.last_seq, state.seed_unknown)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic in a publish (nothing is half-updated
        // that matters), so a poisoned lock is safe to keep using.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
