//! Which sessions of a journal are live in this process: the single-writer rule across
//! handles. A session's loops hold its claim; a second start or restore of the same session
//! while the claim is held is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use treadle_event::SessionId;

/// The live sessions of one journal, each with its "stopping" flag.
#[derive(Default)]
pub(super) struct Claims(Mutex<HashMap<SessionId, Arc<AtomicBool>>>);

/// Why a session could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// A handle to it is open and it is not shutting down.
    Live,
    /// Its last handle was dropped or it was shut down; its loops are finishing.
    Stopping,
}

/// The right to write one session's history, held by its loops until they have stopped.
pub(crate) struct SessionClaim {
    claims: Arc<Claims>,
    session: SessionId,
    stopping: Arc<AtomicBool>,
}

impl Claims {
    fn map(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<AtomicBool>>> {
        // Entries are only inserted and removed whole, so a poisoned map is still valid.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn claim(self: &Arc<Self>, session: SessionId) -> Result<SessionClaim, Claimed> {
        let mut map = self.map();
        if let Some(stopping) = map.get(&session) {
            return Err(if stopping.load(Ordering::Acquire) {
                Claimed::Stopping
            } else {
                Claimed::Live
            });
        }
        let stopping = Arc::new(AtomicBool::new(false));
        map.insert(session, stopping.clone());
        Ok(SessionClaim {
            claims: Arc::clone(self),
            session,
            stopping,
        })
    }
}

impl SessionClaim {
    /// The session is shutting down: a restore may wait for the claim instead of failing.
    pub(crate) fn mark_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        let mut map = self.claims.map();
        if map
            .get(&self.session)
            .is_some_and(|flag| Arc::ptr_eq(flag, &self.stopping))
        {
            map.remove(&self.session);
        }
    }
}
