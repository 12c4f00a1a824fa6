//! The unit a batch and its gates work on: a tool call as the model wrote it, and the scope
//! (loop, actor, turn and step) its batch runs in. Below both `batch` and `ask`, which use it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use treadle_event::{EventKind, StepId};
use treadle_hook::{HookCall, Payload};

use crate::context::LoopContext;
use crate::protocol::{LoopMsg, TurnCoords};
use crate::subject::StagedStep;

/// A tool call as the model wrote it.
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Where the turn's batch runs: the loop it belongs to and how to reach its actor.
pub(crate) struct BatchScope<'a> {
    pub ctx: &'a LoopContext,
    pub actor: &'a ActorRef<LoopMsg>,
    pub coords: TurnCoords,
    pub step: StepId,
    /// The step's assistant message and its coordinates, journaled with every gate so a
    /// restore can resume the batch.
    pub staged: &'a StagedStep,
    pub cancel: &'a CancellationToken,
    /// The effect result that the step's commit journals with its `StepDone`.
    pub deferred: &'a Deferred,
}

/// The `EffectResult` of the batch's last call to finish, when that call is effectful: it
/// is journaled in the same append as the step's `StepDone` (one log sync for both) instead
/// of in an append of its own.
///
/// Why only the last: its result would be journaled a moment before the `StepDone` anyway,
/// since nothing of the step but the commit runs after it; a crash in between finds its
/// intent without a result, which restore handles as always (rule 11: an `effect` gate,
/// never a silent re-run). An earlier call's result is journaled at once, so that a crash
/// while the others still run does not lose it. A call that never reports its end (an
/// interrupted batch) keeps the count above zero, and every result is then journaled at once.
#[derive(Default)]
pub(crate) struct Deferred {
    /// Calls of the batch allowed to run whose tool has not returned yet.
    running: AtomicUsize,
    results: Mutex<Vec<EventKind>>,
}

impl Deferred {
    /// Sets how many calls of the batch will run.
    pub(crate) fn expect(&self, calls: usize) {
        self.running.store(calls, Ordering::SeqCst);
    }

    /// A call's tool returned; `true` when it was the last one running.
    pub(crate) fn returned(&self) -> bool {
        let previous = self
            .running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        previous == Ok(1)
    }

    /// Keeps the last call's result for the step's commit.
    pub(crate) fn keep(&self, result: EventKind) {
        self.lock().push(result);
    }

    /// The kept results, for the commit (or to journal alone when the step is discarded).
    pub(crate) fn take(&self) -> Vec<EventKind> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<EventKind>> {
        // The vector is valid whatever a panicking holder did to it.
        self.results.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hook call for `payload` of a call in this scope: the session, loop, turn and step.
pub(crate) fn hook_call(scope: &BatchScope<'_>, payload: Payload) -> HookCall {
    HookCall::new(scope.ctx.session, scope.ctx.loop_id, payload)
        .with_turn(scope.coords.turn)
        .with_step(scope.step)
}
