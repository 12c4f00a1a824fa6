//! Rebuilding a session's state from its journal, after a crash or a clean stop.
//!
//! The committed history of each loop is exactly the input messages of its
//! `TurnStarted` events and the message groups of its `StepDone` events, in journal order
//! (rule 9). A turn that has a `TurnStarted` but no terminal was in flight when the process
//! stopped; restore closes it with `TurnInterrupted`, so every turn in the journal ends,
//! unless it was parked on an open gate or was running an effectful call: then it is
//! resumed (see [`crate::resume`]). `ApproveAlways` answers are rebuilt into the session's approvals.

use std::collections::HashMap;

use treadle_event::{
    Event, EventKind, GateAnswer, GateId, InputId, LoopId, Message, Role, SessionId, StepId,
    TurnId, Usage,
};

use crate::approvals::Approvals;
use crate::journal::{Journal, ReadError};
use crate::subject::{GateKind, GateSubject, StagedStep};

/// What the journal says about a session: its main loop and every loop's state.
pub(crate) struct Restored {
    pub main_loop: LoopId,
    pub loops: HashMap<LoopId, RestoredLoop>,
    /// Tools approved with `ApproveAlways` anywhere in the session.
    pub approvals: Approvals,
    /// The last journal seq read (0 for a new session).
    pub through_seq: u64,
}

/// One loop's committed history and turn count.
#[derive(Default)]
pub(crate) struct RestoredLoop {
    pub history: Vec<Message>,
    pub turns_started: u32,
    /// The turn that was in flight when the process stopped, if any.
    pub in_flight: Option<InFlight>,
}

/// A gate of an in-flight turn, as restore read it.
pub(crate) struct GateRecord {
    pub gate: GateId,
    pub step: Option<StepId>,
    /// `None` when the journaled subject is not a tool-call gate's.
    pub subject: Option<GateSubject>,
    pub answer: Option<GateAnswer>,
}

/// A turn found without a terminal, with what it committed before the stop.
pub(crate) struct InFlight {
    pub turn: TurnId,
    pub input: InputId,
    pub steps: u32,
    pub usage: Usage,
    /// The text of the turn's input message.
    pub input_text: String,
    /// Tool calls in the steps it committed.
    pub tool_calls: u32,
    /// Its gates, in journal order, each with its answer if it has one.
    pub gates: Vec<GateRecord>,
    /// The effectful calls of its uncommitted step (a `StepDone` clears them), by intent.
    pub effects: Vec<EffectRecord>,
}

/// An effectful call of an in-flight turn's uncommitted step, as restore read it.
pub(crate) struct EffectRecord {
    pub call_id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    pub step: Option<StepId>,
    /// The step's staged assistant message, from the intent's subject.
    pub staged: Option<StagedStep>,
    /// `(content, is_error)` once its `EffectResult` is journaled.
    pub result: Option<(String, bool)>,
    /// The effect gate opened over this intent (a later intent clears it: one answer
    /// covers one run).
    pub gate: Option<GateId>,
}

/// Why a session could not be restored. The journal is never modified by a failed restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Start(#[from] crate::error::StartError),
    #[error("the journal has no session {session}")]
    NotFound { session: SessionId },
    /// A session has one writer: restoring one that a handle in this process still runs
    /// would give it two.
    #[error(
        "session {session} is live in this process: a Session handle for it is still open. \
         Use that handle (clone it), or drop every handle (or call shutdown) before restoring"
    )]
    Live { session: SessionId },
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
    // A journal that breaks the shape the runtime writes (an import checks it too) is not
    // rebuilt into a history: a turn that never started, or one started twice, is a hole.
    let mut shape = crate::journal::Shape::default();
    for (seq, event) in &events {
        shape.next(event).map_err(|error| RestoreError::Corrupt {
            seq: *seq,
            detail: error.to_string(),
        })?;
    }
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
                    input_text: message.text_content(),
                    tool_calls: 0,
                    gates: Vec::new(),
                    effects: Vec::new(),
                });
            }
            EventKind::Compacted {
                replaced, summary, ..
            } => {
                let replaced = usize::try_from(*replaced).unwrap_or(usize::MAX);
                crate::compact::apply(&mut state.history, replaced, summary.clone());
            }
            EventKind::StepDone {
                messages, usage, ..
            } => {
                state.history.extend(messages.iter().cloned());
                if let Some(turn) = state.in_flight.as_mut() {
                    turn.effects.clear();
                    turn.steps += 1;
                    turn.usage += *usage;
                    let calls = messages
                        .iter()
                        .filter(|m| m.role == Role::Assistant)
                        .map(|m| m.tool_uses().count())
                        .sum::<usize>();
                    turn.tool_calls = turn
                        .tool_calls
                        .saturating_add(u32::try_from(calls).unwrap_or(u32::MAX));
                }
            }
            EventKind::GateOpened { gate, subject, .. } => {
                if let Some(turn) = state.in_flight.as_mut()
                    && header.turn == Some(turn.turn)
                {
                    let subject = GateSubject::from_value(subject);
                    if let Some(subject) = subject.as_ref().filter(|s| s.kind == GateKind::Effect)
                        && let Some(effect) = turn
                            .effects
                            .iter_mut()
                            .find(|e| subject.call_ids().any(|id| id == e.call_id))
                    {
                        effect.gate = Some(*gate);
                    }
                    turn.gates.push(GateRecord {
                        gate: *gate,
                        step: header.step,
                        subject,
                        answer: None,
                    });
                }
            }
            EventKind::EffectIntent {
                call_id,
                name,
                arguments,
                subject,
            } => {
                if let Some(turn) = state.in_flight.as_mut()
                    && header.turn == Some(turn.turn)
                {
                    // A new intent for a call (it runs again) supersedes the one before.
                    turn.effects.retain(|e| e.call_id != *call_id);
                    turn.effects.push(EffectRecord {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: arguments.clone(),
                        step: header.step,
                        staged: crate::subject::staged_of(subject),
                        result: None,
                        gate: None,
                    });
                }
            }
            EventKind::EffectResult {
                call_id,
                content,
                is_error,
            } => {
                if let Some(turn) = state.in_flight.as_mut()
                    && let Some(effect) = turn.effects.iter_mut().find(|e| e.call_id == *call_id)
                {
                    effect.result = Some((content.clone(), *is_error));
                }
            }
            EventKind::GateResolved { gate, answer } => {
                if let Some(turn) = state.in_flight.as_mut()
                    && let Some(record) = turn.gates.iter_mut().find(|g| g.gate == *gate)
                {
                    record.answer = Some(answer.clone());
                }
            }
            kind if kind.terminal().is_some() => state.in_flight = None,
            _ => {}
        }
    }
    let main_loop = main_loop.ok_or(RestoreError::NotFound { session })?;
    let approvals = Approvals::from_events(events.iter().map(|(_, event)| event));
    Ok(Restored {
        main_loop,
        loops,
        approvals,
        through_seq: events.last().map_or(0, |(seq, _)| *seq),
    })
}
