//! What every turn of a loop shares: its coordinates, model client, tools, hooks and hub.

use std::sync::Arc;

use treadle_event::{Cause, Event, EventKind, Header, InputId, LoopId, SessionId, StepId, TurnId};
use treadle_hook::HookRunner;

use crate::hub::Hub;
use crate::inference::ModelClient;
use crate::journal::Journal;
use crate::tool::ToolSet;

/// The fixed configuration of one loop. Built once; turns hold it behind an `Arc`.
pub(crate) struct LoopContext {
    pub session: SessionId,
    pub loop_id: LoopId,
    pub client: ModelClient,
    pub tools: ToolSet,
    pub hooks: HookRunner,
    pub hub: Hub,
    pub journal: Journal,
    pub system: Option<String>,
    pub max_steps: u32,
    pub queue_capacity: usize,
}

/// Coordinates of the turn in flight, used to stamp the events it emits.
#[derive(Clone, Copy)]
pub(crate) struct TurnCoords {
    pub turn: TurnId,
    pub input: InputId,
}

impl LoopContext {
    pub(crate) fn loop_header(&self) -> Header {
        Header::in_loop(self.session, self.loop_id)
    }

    pub(crate) fn turn_header(&self, coords: TurnCoords, step: Option<StepId>) -> Header {
        let header = self
            .loop_header()
            .with_turn(coords.turn)
            .with_cause(Cause::Input(coords.input));
        match step {
            Some(step) => header.with_step(step),
            None => header,
        }
    }

    /// Publishes an ephemeral event. Never journaled, never blocks.
    pub(crate) fn emit(&self, header: Header, kind: EventKind) {
        debug_assert!(!kind.class().is_enduring());
        self.hub.publish(Arc::new(Event::new(header, kind)), None);
    }
}
