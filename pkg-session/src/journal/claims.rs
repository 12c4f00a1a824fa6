//! Which sessions of a journal are live in this process: the single-writer rule across
//! handles. A session's loops hold its claim; a second start or restore of the same session
//! while the claim is held is refused. An import ([`super::Journal::import`]) holds a
//! shared claim of its own: imports of one session may run together (appends are
//! idempotent), but never while the session is live, and a restore waits for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use treadle_event::SessionId;

/// The live sessions of one journal, each with its "stopping" flag, and the sessions
/// being imported into, with how many imports are running.
#[derive(Default)]
pub(super) struct Claims(Mutex<Held>);

#[derive(Default)]
struct Held {
    live: HashMap<SessionId, Arc<AtomicBool>>,
    importing: HashMap<SessionId, usize>,
}

/// Why a session could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// A handle to it is open and it is not shutting down.
    Live,
    /// Its last handle was dropped or it was shut down; its loops are finishing.
    Stopping,
    /// An import is writing its events; it ends in one batch.
    Importing,
}

/// The right to write one session's history, held by its loops until they have stopped.
pub(crate) struct SessionClaim {
    claims: Arc<Claims>,
    session: SessionId,
    stopping: Arc<AtomicBool>,
}

/// An import's share of one session: no session of that id starts while it is held.
pub(crate) struct ImportClaim {
    claims: Arc<Claims>,
    session: SessionId,
}

impl Claims {
    fn held(&self) -> MutexGuard<'_, Held> {
        // Entries are only inserted and removed whole, so a poisoned map is still valid.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn claim(self: &Arc<Self>, session: SessionId) -> Result<SessionClaim, Claimed> {
        let mut held = self.held();
        if held.importing.contains_key(&session) {
            return Err(Claimed::Importing);
        }
        let map = &mut held.live;
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

    /// A share of `session` for an import: refused while the session is live or stopping.
    pub(super) fn claim_import(
        self: &Arc<Self>,
        session: SessionId,
    ) -> Result<ImportClaim, Claimed> {
        let mut held = self.held();
        if let Some(stopping) = held.live.get(&session) {
            return Err(if stopping.load(Ordering::Acquire) {
                Claimed::Stopping
            } else {
                Claimed::Live
            });
        }
        *held.importing.entry(session).or_default() += 1;
        Ok(ImportClaim {
            claims: Arc::clone(self),
            session,
        })
    }
}

impl ImportClaim {
    /// The session this share is of.
    pub(crate) fn session(&self) -> SessionId {
        self.session
    }
}

impl Drop for ImportClaim {
    fn drop(&mut self) {
        let mut held = self.claims.held();
        if let Some(count) = held.importing.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                held.importing.remove(&self.session);
            }
        }
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
        let mut held = self.claims.held();
        let map = &mut held.live;
        if map
            .get(&self.session)
            .is_some_and(|flag| Arc::ptr_eq(flag, &self.stopping))
        {
            map.remove(&self.session);
        }
    }
}
