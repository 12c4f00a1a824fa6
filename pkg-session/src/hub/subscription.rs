//! The receiving end of a hub subscription and its loss error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::Stream;
use treadle_event::Delivery;

use super::queue::{Queue, Refill};

/// A subscription fell behind on an enduring event and was closed (rule 8, no-silent-loss).
///
/// Everything delivered before this error is complete and in order. To go on, subscribe
/// again with [`super::Hub::subscribe_from`]`(resume_from, ..)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the subscriber fell behind and missed enduring event seq {resume_from}; \
     resume with subscribe_from({resume_from})"
)]
pub struct SubscriptionLost {
    /// The journal seq of the first enduring event this subscription did not deliver.
    pub resume_from: u64,
}

/// A stream of the events one subscriber asked for, from [`super::Hub::subscribe`] or
/// [`super::Hub::subscribe_from`].
///
/// It yields `Ok(Delivery)` in publish order. It ends (`None`) when the hub closes or is
/// dropped, after everything already queued. If the subscriber fell behind on an enduring
/// event, the queued deliveries come first, then one `Err(SubscriptionLost)`, then `None`.
/// Ephemeral events that did not fit the queue are skipped and only counted
/// ([`Subscription::missed`]).
#[must_use = "a subscription does nothing unless polled"]
pub struct Subscription {
    /// Journal events read by `subscribe_from`, yielded before the live queue.
    catch_up: VecDeque<Delivery>,
    /// Live enduring events with a seq up to this were already in `catch_up` (or predate
    /// it); 0 when nothing is to be skipped, since seqs start at 1.
    skip_through: u64,
    queue: Arc<Queue>,
    /// Deliveries taken from `queue` by the last refill, not yet yielded.
    local: VecDeque<Delivery>,
    ended: bool,
}

impl Subscription {
    pub(crate) fn new(queue: Arc<Queue>) -> Self {
        Self {
            catch_up: VecDeque::new(),
            skip_through: 0,
            queue,
            local: VecDeque::new(),
            ended: false,
        }
    }

    pub(crate) fn with_catch_up(mut self, catch_up: VecDeque<Delivery>, through: u64) -> Self {
        self.catch_up = catch_up;
        self.skip_through = through;
        self
    }

    /// The next delivery, or `None` once the subscription has ended: the same as
    /// `StreamExt::next` (a `Subscription` is a `futures::Stream`), with no other crate.
    pub async fn next(&mut self) -> Option<Result<Delivery, SubscriptionLost>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The old name of [`Subscription::next`].
    #[deprecated(
        since = "0.1.0",
        note = "use `next()`, as on a `TurnStream` or a `CatchUp`"
    )]
    pub async fn next_delivery(&mut self) -> Option<Result<Delivery, SubscriptionLost>> {
        self.next().await
    }

    /// How many ephemeral events this subscriber missed because its queue was full.
    pub fn missed(&self) -> u64 {
        self.queue.missed()
    }

    /// Whether journal events read at subscription are still to be yielded.
    pub(super) fn catching_up(&self) -> bool {
        !self.catch_up.is_empty()
    }
}

impl Stream for Subscription {
    type Item = Result<Delivery, SubscriptionLost>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended && this.catch_up.is_empty() {
            return Poll::Ready(None);
        }
        // Take part in tokio's task budget, so a subscriber that never runs dry still lets
        // the other tasks of its worker run.
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        if let Some(delivery) = this.catch_up.pop_front() {
            coop.made_progress();
            return Poll::Ready(Some(Ok(delivery)));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            while let Some(delivery) = this.local.pop_front() {
                this.queue.set_held(this.local.len());
                let seen = delivery.event.is_enduring()
                    && delivery
                        .journal_seq
                        .is_some_and(|seq| seq <= this.skip_through);
                if !seen {
                    coop.made_progress();
                    return Poll::Ready(Some(Ok(delivery)));
                }
            }
            match ready!(this.queue.refill(&mut this.local, cx)) {
                Refill::Filled => continue,
                Refill::Ended(lost) => {
                    coop.made_progress();
                    this.ended = true;
                    return Poll::Ready(
                        lost.map(|resume_from| Err(SubscriptionLost { resume_from })),
                    );
                }
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.queue.drop_receiver();
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("catch_up", &self.catch_up.len())
            .field("local", &self.local.len())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}
