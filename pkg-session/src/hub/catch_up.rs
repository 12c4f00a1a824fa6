//! The stream [`super::Hub::subscribe_from`] returns: the journal's events, a mark where
//! they end, then live events.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use treadle_event::Delivery;

use super::subscription::{Subscription, SubscriptionLost};

/// One item of a [`CatchUp`] stream.
#[derive(Debug, Clone, PartialEq)]
pub enum CatchUpItem {
    /// An event, read from the journal (before [`CatchUpItem::CaughtUp`]) or live (after),
    /// with its journal seq. Named like [`TurnItem::Event`](crate::TurnItem::Event).
    Event(Delivery),
    /// Every journaled event the subscription asked for has been yielded: what follows is
    /// live. `seq` is the last journal seq the catch-up covered (0 when the journal held
    /// none for this session). Yielded exactly once, even when the catch-up was empty.
    CaughtUp {
        /// The last journal seq covered by the catch-up.
        seq: u64,
    },
}

impl CatchUpItem {
    /// The delivery, or `None` for the [`CatchUpItem::CaughtUp`] mark.
    pub fn delivery(self) -> Option<Delivery> {
        match self {
            CatchUpItem::Event(delivery) => Some(delivery),
            CatchUpItem::CaughtUp { .. } => None,
        }
    }
}

/// A subscription from a journal seq: the journaled events from that seq, then one
/// [`CatchUpItem::CaughtUp`], then live events, with no gap and no duplicate. Ends and
/// fails like a [`Subscription`]. [`CatchUp::into_subscription`] drops the mark, for a
/// reader that does not need it.
#[must_use = "a subscription does nothing unless polled"]
#[derive(Debug)]
pub struct CatchUp {
    subscription: Subscription,
    /// The mark still to yield, once the catch-up is drained.
    mark: Option<u64>,
}

impl CatchUp {
    pub(crate) fn new(subscription: Subscription, through: u64) -> Self {
        Self {
            subscription,
            mark: Some(through),
        }
    }

    /// The next item (an event, or the [`CatchUpItem::CaughtUp`] mark once), or `None`
    /// once the subscription has ended: the same as `StreamExt::next` (a `CatchUp` is a
    /// `futures::Stream`), with no other crate.
    pub async fn next(&mut self) -> Option<Result<CatchUpItem, SubscriptionLost>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The same events as one plain [`Subscription`], without the mark.
    pub fn into_subscription(self) -> Subscription {
        self.subscription
    }

    /// Whether the mark has been yielded: everything from here on is live.
    pub fn is_caught_up(&self) -> bool {
        self.mark.is_none()
    }

    /// How many ephemeral events this subscriber missed because its queue was full.
    pub fn missed(&self) -> u64 {
        self.subscription.missed()
    }
}

impl Stream for CatchUp {
    type Item = Result<CatchUpItem, SubscriptionLost>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(seq) = this.mark
            && !this.subscription.catching_up()
        {
            this.mark = None;
            return Poll::Ready(Some(Ok(CatchUpItem::CaughtUp { seq })));
        }
        Pin::new(&mut this.subscription)
            .poll_next(cx)
            .map(|next| next.map(|item| item.map(CatchUpItem::Event)))
    }
}
