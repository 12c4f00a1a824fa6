//! Tools approved with `ApproveAlways` for the rest of a session.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use treadle_event::{Event, EventKind, GateAnswer, GateId};

use crate::subject::GateSubject;

/// Tools approved with [`GateAnswer::ApproveAlways`]: their calls no longer ask.
///
/// Shared by every loop of a session, and cheap to clone. An entry is added only after its
/// `GateResolved` is durable, so a restored session can rebuild exactly this set.
#[derive(Debug, Clone, Default)]
pub struct Approvals(Arc<Mutex<BTreeSet<String>>>);

impl Approvals {
    /// Whether calls of `tool` are approved for the rest of the session.
    pub fn contains(&self, tool: &str) -> bool {
        self.lock().contains(tool)
    }

    /// The approved tool names, sorted.
    pub fn tools(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    pub(crate) fn insert(&self, tool: impl Into<String>) {
        self.lock().insert(tool.into());
    }

    /// Rebuilds the set from journaled events, oldest first: the tools of every gate whose
    /// `GateResolved` answer is `ApproveAlways` (its scope, read from its `GateOpened`).
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let approvals = Approvals::default();
        let mut scopes: HashMap<GateId, Vec<String>> = HashMap::new();
        for event in events {
            match &event.kind {
                EventKind::GateOpened { gate, subject, .. } => {
                    let tools = GateSubject::from_value(subject)
                        .map(|subject| subject.scope.tools)
                        .unwrap_or_default();
                    scopes.insert(*gate, tools);
                }
                EventKind::GateResolved {
                    gate,
                    answer: GateAnswer::ApproveAlways,
                } => {
                    for tool in scopes.remove(gate).into_iter().flatten() {
                        approvals.insert(tool);
                    }
                }
                _ => {}
            }
        }
        approvals
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<String>> {
        // The set is only ever inserted into, so a poisoned lock still guards a valid set.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
