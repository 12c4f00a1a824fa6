//! The unit a batch and its gates work on: a tool call as the model wrote it, and the scope
//! (loop, actor, turn and step) its batch runs in. Below both `batch` and `ask`, which use it.

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use treadle_event::StepId;
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
}

/// The hook call for `payload` of a call in this scope: the session, loop, turn and step.
pub(crate) fn hook_call(scope: &BatchScope<'_>, payload: Payload) -> HookCall {
    HookCall::new(scope.ctx.session, scope.ctx.loop_id, payload)
        .with_turn(scope.coords.turn)
        .with_step(scope.step)
}
