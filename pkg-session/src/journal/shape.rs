//! The shape a session's journal keeps, whoever writes it: its `SessionStarted` first and
//! only there; each turn opened by a `TurnStarted` under a turn id used once, its steps and
//! its one terminal inside it; no new turn while the session is stopped (after
//! `SessionStopped`, until a `SessionRestored`). The runtime writes journals this way;
//! [`super::Journal::import`] refuses events that would break it, and a restore reports a
//! journal that breaks it as corrupt.

use std::collections::HashSet;

use treadle_event::{Event, EventKind, TurnId};

/// The rule of a session's journal an event breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A session's first event is its `SessionStarted`.
    #[error("the session's first event is {kind}, where its session_started must be")]
    NotStarted {
        /// The event's kind (`EventKind::name`).
        kind: &'static str,
    },
    /// A session starts once.
    #[error("a second session_started: a session starts once")]
    StartedTwice,
    /// A turn's events name their turn in the header.
    #[error("{kind} names no turn")]
    NoTurn {
        /// The event's kind.
        kind: &'static str,
    },
    /// A turn id is used by one `TurnStarted`.
    #[error("turn {turn} is started a second time: a turn id is used once")]
    TurnReused {
        /// The turn started again.
        turn: TurnId,
    },
    /// A step or a terminal belongs to a turn that is open in this session.
    #[error(
        "{kind} of turn {turn}, which is not open in this session (never started in it, \
         or already ended)"
    )]
    TurnNotOpen {
        /// The event's kind.
        kind: &'static str,
        /// The turn it names.
        turn: TurnId,
    },
    /// A stopped session runs a turn again only after it was restored.
    #[error("turn_started while the session is stopped (no session_restored since its stop)")]
    Stopped,
}

/// A session's journal as read so far: what the next event may be.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    started: bool,
    stopped: bool,
    open: HashSet<TurnId>,
    used: HashSet<TurnId>,
}

impl Shape {
    /// Takes the session's next event, or says which rule it breaks (and then is unchanged).
    pub(crate) fn next(&mut self, event: &Event) -> Result<(), ShapeError> {
        let kind = event.kind.name();
        let is_start = matches!(event.kind, EventKind::SessionStarted { .. });
        if !self.started {
            if !is_start {
                return Err(ShapeError::NotStarted { kind });
            }
            self.started = true;
            return Ok(());
        }
        let turn = event.header.turn;
        match &event.kind {
            EventKind::SessionStarted { .. } => return Err(ShapeError::StartedTwice),
            EventKind::SessionStopped { .. } => self.stopped = true,
            EventKind::SessionRestored { .. } => self.stopped = false,
            EventKind::TurnStarted { .. } => {
                let turn = turn.ok_or(ShapeError::NoTurn { kind })?;
                if self.stopped {
                    return Err(ShapeError::Stopped);
                }
                if !self.used.insert(turn) {
                    return Err(ShapeError::TurnReused { turn });
                }
                self.open.insert(turn);
            }
            other if matches!(other, EventKind::StepDone { .. }) || other.terminal().is_some() => {
                let turn = turn.ok_or(ShapeError::NoTurn { kind })?;
                if !self.open.contains(&turn) {
                    return Err(ShapeError::TurnNotOpen { kind, turn });
                }
                if other.terminal().is_some() {
                    self.open.remove(&turn);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
