//! Group commit of the state file's durable writes: steps that end together share one sync.
//!
//! A durable redb commit persists every commit before it, made durably or not. So a writer
//! that needs its write to last takes the sync itself when no other writer is syncing (its
//! own commit, made durable: one sync, as before), and otherwise commits without a sync and
//! waits for a sync that begins after its commit: the one in flight may have begun before,
//! so the next one is taken, by one of the writers that waited, for all of them. Steps
//! that end while a sync is in flight are then made durable by one more sync between them,
//! not one each.
//!
//! Each write that needs to last gets a ticket once committed; a sync records the last
//! ticket given before it began, and every write up to that ticket is durable when it ends.

use std::sync::{Condvar, Mutex, PoisonError};

use redb::Durability;

/// Tickets given and made durable.
#[derive(Debug, Default)]
struct Tickets {
    /// The last ticket given to a committed write.
    given: u64,
    /// Every write up to this ticket is durable.
    durable: u64,
    /// Whether a writer is syncing now.
    syncing: bool,
}

/// The state file's group commit (see the module's documentation).
#[derive(Debug, Default)]
pub(super) struct GroupSync {
    tickets: Mutex<Tickets>,
    synced: Condvar,
}

impl GroupSync {
    /// Runs `write` (one transaction's commit, at the durability it is given) so that it is
    /// durable when this returns; `sync` commits an empty durable transaction. A failed
    /// sync is returned to the writer whose write it was to make durable.
    pub(super) fn durable<E>(
        &self,
        write: impl FnOnce(Durability) -> Result<(), E>,
        sync: impl Fn() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut t = self.lock();
        if !t.syncing {
            // Nobody syncs: this write's own commit is the sync, of it and all before it.
            t.syncing = true;
            let upto = t.given;
            drop(t);
            let written = write(Durability::Immediate);
            self.done(written.is_ok().then_some(upto));
            return written;
        }
        drop(t);
        write(Durability::None)?;
        let mut t = self.lock();
        t.given += 1;
        let mine = t.given;
        loop {
            if t.durable >= mine {
                return Ok(());
            }
            if !t.syncing {
                t.syncing = true;
                let upto = t.given;
                drop(t);
                let synced = sync();
                self.done(synced.is_ok().then_some(upto));
                synced?;
                t = self.lock();
                continue;
            }
            t = self.synced.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Ends a sync: every write up to `upto` is durable when it succeeded.
    fn done(&self, upto: Option<u64>) {
        let mut t = self.lock();
        t.syncing = false;
        if let Some(upto) = upto {
            t.durable = t.durable.max(upto);
        }
        drop(t);
        self.synced.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Writers that end while a sync is in flight share the next one: 8 writers, each
    /// durable when it returns, with fewer syncs than writers.
    #[test]
    fn writes_that_wait_for_a_sync_share_the_next_one() {
        let group = Arc::new(GroupSync::default());
        let syncs = Arc::new(AtomicUsize::new(0));
        // The first writer's sync is held until every other writer has its ticket.
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (group, syncs) = (group.clone(), syncs.clone());
                std::thread::spawn(move || {
                    if i > 0 {
                        // Let writer 0 take the sync first.
                        while !group.lock().syncing {
                            std::thread::yield_now();
                        }
                    }
                    group.durable::<()>(
                        |d| {
                            if matches!(d, Durability::Immediate) {
                                syncs.fetch_add(1, Ordering::SeqCst);
                                while i == 0 && group.lock().given < 7 {
                                    std::thread::yield_now();
                                }
                            }
                            Ok(())
                        },
                        || {
                            syncs.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        },
                    )
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let t = group.lock();
        assert_eq!((t.given, t.durable, t.syncing), (7, 7, false));
        assert_eq!(
            syncs.load(Ordering::SeqCst),
            2,
            "one for writer 0, one for the rest"
        );
    }

    #[test]
    fn a_lone_writer_syncs_its_own_commit() {
        let group = GroupSync::default();
        let mut seen = Vec::new();
        for _ in 0..3 {
            group
                .durable::<()>(
                    |d| {
                        seen.push(matches!(d, Durability::Immediate));
                        Ok(())
                    },
                    || panic!("no extra sync for a lone writer"),
                )
                .unwrap();
        }
        assert_eq!(seen, vec![true; 3], "each write is its own durable commit");
    }
}
