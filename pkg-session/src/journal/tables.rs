//! The redb tables of a journal file and the key conversions they share.
//!
//! Table names carry a version suffix so that a future layout can live beside this one in
//! the same file while it is migrated.

use redb::TableDefinition;
use treadle_event::{EventId, SessionId};

/// seq → versioned event bytes (see `codec`).
pub(crate) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events.v1");

/// event id → seq; makes appends idempotent.
pub(crate) const IDS: TableDefinition<u128, u64> = TableDefinition::new("event_ids.v1");

/// (session, seq) → (); per-session range reads in seq order.
pub(crate) const BY_SESSION: TableDefinition<(u128, u64), ()> =
    TableDefinition::new("session_seqs.v1");

// Big-endian, so the numeric key order is the ids' byte order, which is their time order.
pub(crate) fn session_key(session: SessionId) -> u128 {
    u128::from_be_bytes(session.to_bytes())
}

pub(crate) fn session_from_key(key: u128) -> SessionId {
    SessionId::from_bytes(key.to_be_bytes())
}

pub(crate) fn event_key(id: EventId) -> u128 {
    u128::from_be_bytes(id.to_bytes())
}
