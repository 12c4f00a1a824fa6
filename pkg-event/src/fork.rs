//! Where a forked session comes from: the parent session and the committed point it was
//! forked at, journaled with the fork's `SessionStarted`.

use serde::{Deserialize, Serialize};

use crate::ids::{SessionId, StepId, TurnId};

/// A committed point of a session's main loop, named by the ids its journal gives it.
///
/// A fork's history is the parent's committed history up to this point. Only committed
/// points can be named: a turn that has begun (its input is committed with `TurnStarted`),
/// a turn that has ended (its terminal), a step whose `StepDone` is journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum ForkPoint {
    /// Just before this turn began: the fork has the history of the turns before it, and
    /// its next input takes the turn's place (the same question asked another way).
    BeforeTurn(TurnId),
    /// Once this turn has ended: the fork has its history through the turn's last step.
    AfterTurn(TurnId),
    /// Once this step committed: the fork has the history through the step's messages. The
    /// turn the step belongs to is closed in the fork with `TurnInterrupted` (it never
    /// ran on there), so the fork's next input goes on from the step.
    AfterStep(StepId),
}

/// The parent of a forked session, journaled in the fork's `SessionStarted`.
///
/// The events that follow the fork's `SessionStarted` begin with `copied` copies of the
/// parent's committed-history events (turn starts, steps, compactions, turn ends) through
/// the parent's journal seq `through_seq`, each with a new event id and the fork's session
/// and loop ids, and keeping the parent's turn, step and input ids; then come the terminals
/// that close turns the fork point cut. Gates, their answers and effect records are never
/// copied: a fork asks every gate again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkLink {
    /// The session forked.
    pub session: SessionId,
    /// Where.
    pub at: ForkPoint,
    /// The parent's last journal seq the fork's history covers.
    pub through_seq: u64,
    /// How many of the fork's events after its `SessionStarted` are copies of the parent's.
    pub copied: u32,
}
