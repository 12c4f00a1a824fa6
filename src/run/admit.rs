//! Admission of `across:` cells against the block's `budget: { tokens }`: the cells the
//! block may start, in declaration order, and when it must stop starting them.
//!
//! Admission sees only what finished cells reported (the job's token counter grows when a
//! step ends), so on its own a ceiling cannot hold back cells that start together. A
//! reservation (`reserve_per_cell:`, else the cell agent's own `budget.tokens`) charges
//! each admitted cell that has not finished yet; a cell that would take the total over
//! the ceiling waits for a running one to finish instead. Spend only grows, so once it
//! reaches the ceiling no further cell is ever admitted; reservations are handed back, so
//! a wait on them always ends.

use std::sync::Mutex;

use tokio::sync::Notify;

/// What admission decided for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Start it.
    Go,
    /// The allowance is spent: this cell and every later one stay out (`spent` tokens of
    /// `limit`). Only the first cell refused hears this; the later ones hear `Closed`.
    Spent {
        /// Tokens the block's cells spent.
        spent: u64,
        /// The ceiling.
        limit: u64,
    },
    /// Admission stopped (spent, or closed by `fail_fast`).
    Closed,
}

#[derive(Debug, Default)]
struct State {
    /// The index of the next cell to admit (cells are admitted in order).
    next: usize,
    /// Cells admitted and not finished yet, each holding a reservation.
    running: u64,
    /// No further cell is admitted.
    closed: bool,
}

/// One block's admission.
#[derive(Debug)]
pub(crate) struct Admission {
    limit: Option<u64>,
    reserve: u64,
    state: Mutex<State>,
    changed: Notify,
}

impl Admission {
    /// Admission under a `limit` (none: every cell is admitted) charging `reserve` tokens
    /// for each running cell.
    pub(crate) fn new(limit: Option<u64>, reserve: u64) -> Self {
        Self {
            limit,
            reserve,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    /// Waits until cell `index` may start, given the tokens the block's cells spent so
    /// far (`spent`, read each time admission decides).
    pub(crate) async fn admit(&self, index: usize, spent: impl Fn() -> u64) -> Admit {
        loop {
            // Registered before the state is read, so a change in between still wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(decided) = self.decide(index, spent()) {
                if decided != Admit::Go {
                    self.changed.notify_waiters();
                }
                return decided;
            }
            changed.await;
        }
    }

    /// `None`: wait for a running cell to finish (or an earlier cell to be admitted).
    fn decide(&self, index: usize, spent: u64) -> Option<Admit> {
        let Ok(mut s) = self.state.lock() else {
            return Some(Admit::Closed);
        };
        if s.closed {
            return Some(Admit::Closed);
        }
        if s.next != index {
            return None;
        }
        if let Some(limit) = self.limit {
            if spent >= limit {
                s.closed = true;
                return Some(Admit::Spent { spent, limit });
            }
            let committed = spent.saturating_add(self.reserve.saturating_mul(s.running + 1));
            // With nothing running, waiting would never end: the cell is admitted on
            // spend alone.
            if s.running > 0 && committed > limit {
                return None;
            }
        }
        s.next += 1;
        s.running += 1;
        drop(s);
        self.changed.notify_waiters();
        Some(Admit::Go)
    }

    /// A cell admitted earlier finished: its reservation is handed back.
    pub(crate) fn release(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.running = s.running.saturating_sub(1);
        }
        self.changed.notify_waiters();
    }

    /// Admits no further cell (`fail_fast` after a failure).
    pub(crate) fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::{Admission, Admit};

    #[tokio::test]
    async fn without_a_limit_every_cell_is_admitted_in_order() {
        let a = Admission::new(None, 0);
        for i in 0..3 {
            assert_eq!(a.admit(i, || 1_000_000).await, Admit::Go);
        }
    }

    #[tokio::test]
    async fn spend_at_the_ceiling_closes_admission_for_good() {
        let a = Admission::new(Some(100), 0);
        assert_eq!(a.admit(0, || 0).await, Admit::Go);
        a.release();
        assert_eq!(
            a.admit(1, || 120).await,
            Admit::Spent {
                spent: 120,
                limit: 100
            }
        );
        assert_eq!(a.admit(2, || 0).await, Admit::Closed);
    }

    #[tokio::test]
    async fn reservations_pause_a_cell_until_a_running_one_finishes() {
        let a = std::sync::Arc::new(Admission::new(Some(100), 40));
        assert_eq!(a.admit(0, || 0).await, Admit::Go);
        assert_eq!(a.admit(1, || 0).await, Admit::Go);
        // A third reservation would commit 120 of 100: it waits.
        let waiting = tokio::spawn({
            let a = a.clone();
            async move { a.admit(2, || 10).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "admitted against reservations");
        a.release();
        assert_eq!(waiting.await.ok(), Some(Admit::Go));
    }
}
