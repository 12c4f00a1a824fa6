//! A lone step's log sync overlapped with the next model call.
//!
//! A tool step the turn goes on after is sent to the actor to commit, and the next
//! request, which carries that step's messages, goes out at once instead of after the
//! journal's acknowledgement: the log sync (about a model round-trip's time on a local
//! model) then runs while the model answers. What stays as it was:
//!
//! * Rule 2: the step is published (`StepDone`) and joins the actor's history only once
//!   the journal acknowledged it; the actor commits it exactly as before.
//! * What subscribers see: the next call's deltas are held here until that
//!   acknowledgement, so no delta of a step reaches anyone before the `StepDone` of the
//!   step before it, and none at all if that step's commit is refused (rule 3 then holds
//!   as before: a step's deltas are published before its own `StepDone`, which waits for
//!   the call to end).
//! * A refused commit ends the turn with that error, as it did (rule 4): the call in
//!   flight is dropped, and the counts go back to the last acknowledged step.
//! * Rule 5: a loop with hooks never overlaps (`tools.rs`), since a step's finish hooks
//!   follow its journal append and come before the next step's begin. Nor does a session
//!   with a write fence: a worker whose lease went to another makes no model call after
//!   the refused append.
//!
//! Decision: only the model call overlaps. Everything else that follows a commit (a
//! compaction, the next tool batch, the turn's terminal) waits for the acknowledgement
//! first ([`Turn::settle`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::{Either, select};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use treadle_event::{DeltaKind, Usage};

use crate::error::CommitError;

use super::Turn;

/// A step's commit sent to the actor and not yet acknowledged.
pub(super) struct Pending {
    pub(super) ack: oneshot::Receiver<Result<(), CommitError>>,
    /// The turn's counts before the step, restored if its commit is refused.
    pub(super) before: Counts,
}

/// What a turn counts per committed step.
#[derive(Clone, Copy)]
pub(super) struct Counts {
    usage: Usage,
    steps: u32,
}

/// Waits for the actor's answer to a step's commit.
pub(super) async fn acknowledged(
    ack: oneshot::Receiver<Result<(), CommitError>>,
) -> Result<(), CommitError> {
    ack.await.unwrap_or(Err(CommitError::ActorGone))
}

/// Runs the model `call` alongside the acknowledgement of the step before it. `acked` runs
/// as soon as that step is acknowledged, before anything more of the call is handled;
/// the call's result is given only once both are done. A refused commit drops the call at
/// once. `None`: the turn was canceled (the acknowledgement is still waited for).
pub(super) async fn alongside<T>(
    ack: oneshot::Receiver<Result<(), CommitError>>,
    call: impl Future<Output = T>,
    cancel: &CancellationToken,
    acked: impl FnOnce(),
) -> Result<Option<T>, CommitError> {
    let ack = std::pin::pin!(async move { acknowledged(ack).await.map(|()| acked()) });
    let call = std::pin::pin!(async move {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            result = call => Some(result),
        }
    });
    match select(ack, call).await {
        Either::Left((acked, call)) => {
            acked?;
            Ok(call.await)
        }
        Either::Right((result, ack)) => {
            ack.await?;
            Ok(result)
        }
    }
}

/// A model call's deltas while the step before it is unacknowledged.
pub(super) struct Waiting {
    /// Whether deltas are held; cleared once, by [`Waiting::release`].
    holding: AtomicBool,
    held: Mutex<Vec<(DeltaKind, Option<u32>, String)>>,
}

impl Waiting {
    pub(super) fn new(holding: bool) -> Self {
        Waiting {
            holding: AtomicBool::new(holding),
            held: Mutex::new(Vec::new()),
        }
    }

    /// Gives a delta back to be published now, or keeps it until [`Waiting::release`]
    /// (only if `wanted`: nobody takes the loop's deltas otherwise).
    pub(super) fn hold(
        &self,
        kind: DeltaKind,
        index: Option<u32>,
        text: String,
        wanted: impl FnOnce() -> bool,
    ) -> Option<(DeltaKind, Option<u32>, String)> {
        if !self.holding.load(Ordering::Acquire) {
            return Some((kind, index, text));
        }
        if wanted() {
            self.held().push((kind, index, text));
        }
        None
    }

    /// The step before is acknowledged: publishes what was held, in order, and lets the
    /// rest through.
    pub(super) fn release(&self, publish: impl Fn(DeltaKind, Option<u32>, String)) {
        let held = std::mem::take(&mut *self.held());
        self.holding.store(false, Ordering::Release);
        for (kind, index, text) in held {
            publish(kind, index, text);
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<(DeltaKind, Option<u32>, String)>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Turn {
    /// The counts a refused commit goes back to.
    pub(super) fn counts(&self) -> Counts {
        Counts {
            usage: self.usage,
            steps: self.steps,
        }
    }

    /// Goes back to `before`, the counts of the last acknowledged step.
    pub(super) fn undo(&mut self, before: Counts) {
        self.usage = before.usage;
        self.steps = before.steps;
    }

    /// Waits for the acknowledgement of the step sent last, if one is pending.
    pub(super) async fn settle(&mut self) -> Result<(), CommitError> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let result = acknowledged(pending.ack).await;
        if result.is_err() {
            self.undo(pending.before);
        }
        result
    }
}
