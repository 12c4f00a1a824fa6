//! Rebuilding a session's state from its journal, after a crash or a clean stop.
//!
//! The committed history of each loop is exactly the input messages of its
//! `TurnStarted` events and the message groups of its `StepDone` events, in journal order
//! (rule 9). A turn that has a `TurnStarted` but no terminal was in flight when the process
//! stopped; restore closes it with `TurnInterrupted`, so every turn in the journal ends.

use std::collections::HashMap;

use treadle_event::{
    Cause, Event, EventKind, Header, InputId, LoopId, Message, SessionId, TurnId, Usage,
};

use crate::journal::{Journal, ReadError};

/// What the journal says about a session: its main loop and every loop's state.
pub(crate) struct Restored {
    pub main_loop: LoopId,
    pub loops: HashMap<LoopId, RestoredLoop>,
}

/// One loop's committed history and turn count.
#[derive(Default)]
pub(crate) struct RestoredLoop {
    pub history: Vec<Message>,
    pub turns_started: u32,
    /// The turn that was in flight when the process stopped, if any.
    pub in_flight: Option<InFlight>,
}

/// A turn found without a terminal, with what it committed before the stop.
pub(crate) struct InFlight {
    pub turn: TurnId,
    pub input: InputId,
    pub steps: u32,
    pub usage: Usage,
}

/// Why a session could not be restored. The journal is never modified by a failed restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Start(#[from] crate::error::StartError),
    #[error("the journal has no session {session}")]
    NotFound { session: SessionId },
    #[error(
        "the journal entry at seq {seq} is corrupt ({detail}); entries before it are intact \
         and were not changed. Restore refuses to rebuild a history with a hole in it"
    )]
    Corrupt { seq: u64, detail: String },
    #[error("cannot read the journal: {0}")]
    Read(ReadError),
    #[error("cannot record the interrupted turn: {0}")]
    Append(#[from] crate::journal::AppendError),
}

impl From<ReadError> for RestoreError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Corrupt { seq, detail } => RestoreError::Corrupt { seq, detail },
            other => RestoreError::Read(other),
        }
    }
}

pub(crate) fn read(journal: &Journal, session: SessionId) -> Result<Restored, RestoreError> {
    let events = journal.read(session, 0, None)?;
    let mut main_loop = None;
    let mut loops: HashMap<LoopId, RestoredLoop> = HashMap::new();
    for (_, Event { header, kind }) in &events {
        if let EventKind::SessionStarted { .. } = kind {
            main_loop = main_loop.or(header.loop_id);
            continue;
        }
        let Some(loop_id) = header.loop_id else {
            continue;
        };
        let state = loops.entry(loop_id).or_default();
        match kind {
            EventKind::TurnStarted { input, message } => {
                state.turns_started += 1;
                state.history.push(message.clone());
                state.in_flight = header.turn.map(|turn| InFlight {
                    turn,
                    input: *input,
                    steps: 0,
                    usage: Usage::default(),
                });
            }
            EventKind::StepDone {
                messages, usage, ..
            } => {
                state.history.extend(messages.iter().cloned());
                if let Some(turn) = state.in_flight.as_mut() {
                    turn.steps += 1;
                    turn.usage += *usage;
                }
            }
            kind if kind.terminal().is_some() => state.in_flight = None,
            _ => {}
        }
    }
    let main_loop = main_loop.ok_or(RestoreError::NotFound { session })?;
    Ok(Restored { main_loop, loops })
}

pub(crate) fn close_in_flight(session: SessionId, loop_id: LoopId, turn: &InFlight) -> Event {
    let header = Header::in_loop(session, loop_id)
        .with_turn(turn.turn)
        .with_cause(Cause::Input(turn.input));
    Event::new(
        header,
        EventKind::TurnInterrupted {
            reason: "the process stopped while this turn was in flight; closed at restore".into(),
            steps: turn.steps,
            usage: turn.usage,
        },
    )
}
