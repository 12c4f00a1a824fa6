//! The bounded queue between the hub and one subscriber.
//!
//! A mutex-guarded deque rather than a tokio channel: the publisher pays one uncontended
//! lock per delivery and wakes the subscriber only when it is parked, and the subscriber
//! takes the whole deque in one swap instead of locking per item. Fan-out to many
//! subscribers is the hot path of a streaming turn, and the channel's semaphore
//! bookkeeping was most of its cost.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use treadle_event::Delivery;

/// Why a delivery did not enter the queue.
pub(crate) enum Rejected {
    Full,
    /// The subscription was dropped.
    Gone,
}

/// What a subscriber's refill found.
pub(crate) enum Refill {
    /// `local` now holds deliveries.
    Filled,
    /// The queue ended; `Some(seq)` if it ended by losing the enduring event `seq`.
    Ended(Option<u64>),
}

pub(crate) struct Queue {
    capacity: usize,
    state: Mutex<State>,
    /// Deliveries the subscriber took in its last refill and has not yielded yet. They
    /// count against the capacity, so the bound covers the whole path to the reader. Only
    /// the subscriber writes it, with plain stores.
    held: AtomicUsize,
    missed: AtomicU64,
}

struct State {
    items: VecDeque<Delivery>,
    /// Set only while the subscriber is parked on an empty queue.
    waker: Option<Waker>,
    closed: bool,
    lost: Option<u64>,
    receiver_gone: bool,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::new(State {
                items: VecDeque::new(),
                waker: None,
                closed: false,
                lost: None,
                receiver_gone: false,
            }),
            held: AtomicUsize::new(0),
            missed: AtomicU64::new(0),
        }
    }

    pub(crate) fn try_push(&self, delivery: Delivery) -> Result<(), Rejected> {
        let waker = {
            let mut state = self.lock();
            if state.receiver_gone {
                return Err(Rejected::Gone);
            }
            if state.items.len() + self.held.load(Ordering::Relaxed) >= self.capacity {
                return Err(Rejected::Full);
            }
            state.items.push_back(delivery);
            state.waker.take()
        };
        // Woken outside the lock, so the subscriber does not wake straight into contention.
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Ends the queue after what it holds; `lost` records the enduring seq it could not
    /// take. Only the first close counts.
    pub(crate) fn close(&self, lost: Option<u64>) {
        let waker = {
            let mut state = self.lock();
            if state.closed {
                return;
            }
            state.closed = true;
            state.lost = lost;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(crate) fn count_missed(&self) {
        self.missed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }

    /// Moves every queued delivery into `local`, which must be empty (everything taken by
    /// the previous refill has been yielded).
    pub(crate) fn refill(
        &self,
        local: &mut VecDeque<Delivery>,
        cx: &mut Context<'_>,
    ) -> Poll<Refill> {
        let mut state = self.lock();
        if !state.items.is_empty() {
            // A swap, so the two buffers trade places and neither is reallocated.
            std::mem::swap(&mut state.items, local);
            self.held.store(local.len(), Ordering::Relaxed);
            return Poll::Ready(Refill::Filled);
        }
        if state.closed {
            return Poll::Ready(Refill::Ended(state.lost.take()));
        }
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The subscriber has yielded all but `held` of its last refill.
    pub(crate) fn set_held(&self, held: usize) {
        self.held.store(held, Ordering::Relaxed);
    }

    /// Whether a reader may still take what is pushed: not closed and not dropped.
    pub(crate) fn is_open(&self) -> bool {
        let state = self.lock();
        !state.closed && !state.receiver_gone
    }

    /// The subscriber is gone: free what it would have read and refuse further pushes.
    pub(crate) fn drop_receiver(&self) {
        let mut state = self.lock();
        state.receiver_gone = true;
        state.items = VecDeque::new();
        state.waker = None;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing here can panic half-way through an update, so a poisoned lock is fine.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
