//! Choosing which events a subscription receives, and what it yields.

use std::sync::Arc;

use crate::event::{Event, Scope};
use crate::ids::LoopId;

/// Which loops' events pass, for one delivery class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LoopScope {
    /// Every loop of the session.
    #[default]
    All,
    /// No loop: only session-scoped events of this class pass.
    None,
    /// The listed loops.
    Only(Vec<LoopId>),
}

impl LoopScope {
    fn admits(&self, loop_id: Option<LoopId>) -> bool {
        match self {
            LoopScope::All => true,
            LoopScope::None => false,
            LoopScope::Only(loops) => loop_id.is_some_and(|l| loops.contains(&l)),
        }
    }
}

/// Picks loops separately for ephemeral and enduring events. Session-scoped events always
/// pass.
///
/// ```
/// use treadle_event::{EventFilter, LoopScope};
///
/// // A viewer that wants the committed record of every loop but no token stream:
/// let filter = EventFilter { ephemeral: LoopScope::None, enduring: LoopScope::All };
/// assert_eq!(filter, EventFilter::enduring_only());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub ephemeral: LoopScope,
    pub enduring: LoopScope,
}

impl EventFilter {
    /// Everything from every loop.
    pub fn all() -> Self {
        Self::default()
    }

    /// Enduring events of every loop, no ephemeral ones.
    pub fn enduring_only() -> Self {
        Self {
            ephemeral: LoopScope::None,
            enduring: LoopScope::All,
        }
    }

    /// Whether `event` passes this filter.
    pub fn admits(&self, event: &Event) -> bool {
        if event.kind.scope() == Scope::Session {
            return true;
        }
        let scope = if event.is_enduring() {
            &self.enduring
        } else {
            &self.ephemeral
        };
        scope.admits(event.header.loop_id)
    }
}

/// One event as a subscription yields it. Enduring events carry their journal sequence
/// number, which a reconnecting reader passes to catch up from.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub event: Arc<Event>,
    pub journal_seq: Option<u64>,
}
