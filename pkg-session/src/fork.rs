//! Forking a session: a new session, with its own id, whose committed history is another
//! session's up to a committed point ([`ForkPoint`]). The parent is only read.
//!
//! # How a fork is written (rule 1, single writer; rule 14, fork-exact)
//!
//! The fork is a session of its own from its first event on: it claims its new id like
//! [`SessionBuilder::start`], and its own hub writes, in **one atomic append**, its
//! `SessionStarted` (with the [`ForkLink`]), copies of the parent's committed-history
//! events through the point (`TurnStarted`, `StepDone`, `Compacted`, turn terminals; new
//! event ids, the fork's session and loop ids, the parent's turn, step and input ids), and a
//! `TurnInterrupted` for each turn the point cut. A crash leaves either the whole fork or no
//! fork. The fork is then started the way a restore starts a session: from what its own
//! journal says ([`crate::restore`]), so its live history is by construction what a later
//! [`SessionBuilder::restore`] of it gives.
//!
//! # Gates are asked again
//!
//! `GateOpened`, `GateResolved`, `EffectIntent` and `EffectResult` are never copied. A gate
//! belongs to a step that had not committed when it was asked, so it is past any fork point;
//! in the fork the model is asked again, and a call it makes opens the fork's own gate (a
//! new id), which nobody has answered. An answer given in the parent, before or after the
//! fork, never reaches the fork, and `ApproveAlways` approvals of the parent do not hold
//! there either: a fork starts with no approvals.

use std::collections::HashMap;

use treadle_event::{
    Cause, Event, EventKind, ForkLink, ForkPoint, Header, InputId, LoopId, Message, SessionId,
    StepId, TurnId, Usage,
};

use crate::builder::SessionBuilder;
use crate::error::StartError;
use crate::journal::{AppendError, JournalView, ReadError};
use crate::restore::{self, RestoreError};
use crate::session::Session;

/// Why a session could not be forked. A failed fork writes nothing: the fork's events go in
/// one append, and the parent is only read.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("the journal has no session {session} to fork")]
    NotFound { session: SessionId },
    #[error("session {session}'s main loop has no {at:?} to fork at")]
    NoSuchPoint { session: SessionId, at: ForkPoint },
    #[error(
        "turn {turn} of session {session} has not ended, so there is no point after it: fork \
         before it (ForkPoint::BeforeTurn) or after one of its steps (ForkPoint::AfterStep)"
    )]
    TurnNotEnded { session: SessionId, turn: TurnId },
    #[error("cannot read the journal: {0}")]
    Read(#[from] ReadError),
    #[error("cannot start the fork from its journal: {0}")]
    Restore(#[from] RestoreError),
    #[error("cannot record the fork: {0}")]
    Append(#[from] AppendError),
}

/// One turn of a session's main loop, as committed: what a fork point can name.
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedTurn {
    pub turn: TurnId,
    /// The turn's input message.
    pub input: Message,
    /// Its committed steps, in order.
    pub steps: Vec<StepId>,
    /// Whether its terminal is journaled ([`ForkPoint::AfterTurn`] needs it).
    pub ended: bool,
}

impl JournalView {
    /// The committed turns of `session`'s main loop, in order, with their steps: the points
    /// [`SessionBuilder::fork`] can fork at.
    pub fn committed_turns(&self, session: SessionId) -> Result<Vec<CommittedTurn>, ReadError> {
        let events = self.read(session, 0, None)?;
        let main = events.iter().find_map(|(_, e)| match e.kind {
            EventKind::SessionStarted { .. } => e.header.loop_id,
            _ => None,
        });
        let mut turns: Vec<CommittedTurn> = Vec::new();
        for (_, event) in events.iter().filter(|(_, e)| e.header.loop_id == main) {
            let current = turns
                .last_mut()
                .filter(|t| Some(t.turn) == event.header.turn);
            match (&event.kind, event.header.turn, current) {
                (EventKind::TurnStarted { message, .. }, Some(turn), _) => {
                    turns.push(CommittedTurn {
                        turn,
                        input: message.clone(),
                        steps: Vec::new(),
                        ended: false,
                    })
                }
                (EventKind::StepDone { .. }, _, Some(current)) => {
                    current.steps.extend(event.header.step);
                }
                (kind, _, Some(current)) if kind.terminal().is_some() => current.ended = true,
                _ => {}
            }
        }
        Ok(turns)
    }
}

impl SessionBuilder {
    /// Forks session `parent` of this builder's journal at the committed point `at`: a new
    /// session, with its own id, whose committed history is the parent's up to `at`, run
    /// with this builder's model, tools and hooks (like [`SessionBuilder::restore`], which
    /// a fork is restored with, as any session). The parent, live or not, is only read and
    /// never changed; its later events do not reach the fork. The fork's `SessionStarted`
    /// records the parent and the point ([`ForkLink`]).
    ///
    /// A turn the point cuts (an [`AfterStep`](ForkPoint::AfterStep) inside it) is closed
    /// in the fork with `TurnInterrupted`, so the fork's next input goes on from that step.
    /// No gate, gate answer or approval of the parent comes across: whatever the parent was
    /// asked after the point, the fork asks again (see the module's notes in the guide,
    /// `docs/library.md`, "Forking a session").
    ///
    /// ```no_run
    /// # async fn demo(parent: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// use treadle_session::{ForkPoint, Session};
    /// let turns = parent.journal().committed_turns(parent.id())?;
    /// let fork = Session::builder()
    ///     .endpoint("http://127.0.0.1:8091/v1")
    ///     .model("qwen2.5-coder-0.5b")
    ///     .journal_path(".treadle/journal.redb") // the parent's journal
    ///     .fork(parent.id(), ForkPoint::BeforeTurn(turns[0].turn))
    ///     .await?;
    /// println!("{}", fork.turn("The same question, asked another way.").answer().await?);
    /// # Ok(()) }
    /// ```
    pub async fn fork(self, parent: SessionId, at: ForkPoint) -> Result<Session, ForkError> {
        self.fork_in(None, parent, at).await
    }

    /// [`SessionBuilder::fork`] of a session journaled in another file, `source`: the fork
    /// is written to this builder's journal, and `source` is only read.
    pub async fn fork_from(
        self,
        source: &JournalView,
        parent: SessionId,
        at: ForkPoint,
    ) -> Result<Session, ForkError> {
        self.fork_in(Some(source.clone()), parent, at).await
    }

    async fn fork_in(
        mut self,
        source: Option<JournalView>,
        parent: SessionId,
        at: ForkPoint,
    ) -> Result<Session, ForkError> {
        let (client, journal) = self.connect()?;
        let source = source.unwrap_or_else(|| (*journal).clone());
        let events = source.read(parent, 0, None)?;
        let fork = SessionId::new();
        let claim = journal
            .claim(fork)
            .map_err(|_| StartError::Spawn("a new session id is already claimed".into()))?;
        let main = LoopId::new();
        let mut loops = LoopMap::new(main, |name| {
            (
                crate::delegate::loop_id(parent, name),
                crate::delegate::loop_id(fork, name),
            )
        });
        for name in self.sub_agent_names() {
            loops.name(&name);
        }
        let plan = plan(&events, parent, at, fork, &mut loops)?;
        let started = Event::new(
            Header::in_loop(fork, main),
            EventKind::SessionStarted {
                model: client.model().to_owned(),
                endpoint: client.endpoint().to_owned(),
                system: self.system_text(),
                parent: self.parent_link(),
                fork: Some(plan.link),
            },
        );
        let hub = self.hub(fork, &journal, main);
        hub.commit_group(std::iter::once(started).chain(plan.events).collect())
            .await?;
        // Started from its own journal, as a restore would: what it runs on is what it wrote.
        let restored = restore::read(&journal, fork)?;
        let claim = std::sync::Arc::new(claim);
        Ok(self
            .launch(client, journal, hub, restored, HashMap::new(), claim)
            .await?)
    }
}

/// The parent's loop ids and the fork's: the main loop's, each sub-agent's (derived from
/// the session id and the agent's name), and a fresh id for any other.
struct LoopMap<F> {
    map: HashMap<LoopId, LoopId>,
    derive: F,
    parent_main: Option<LoopId>,
    main: LoopId,
}

impl<F: Fn(&str) -> (LoopId, LoopId)> LoopMap<F> {
    fn new(main: LoopId, derive: F) -> Self {
        LoopMap {
            map: HashMap::new(),
            derive,
            parent_main: None,
            main,
        }
    }

    fn name(&mut self, name: &str) {
        let (from, to) = (self.derive)(name);
        self.map.insert(from, to);
    }

    fn get(&mut self, parent: LoopId) -> LoopId {
        if Some(parent) == self.parent_main {
            return self.main;
        }
        *self.map.entry(parent).or_default()
    }
}

/// The fork's events after its `SessionStarted`, and its link.
struct Plan {
    link: ForkLink,
    events: Vec<Event>,
}

/// A turn begun and not ended within the copied events.
struct Open {
    turn: TurnId,
    input: InputId,
    steps: u32,
    usage: Usage,
}

/// Copies the parent's committed history through the point `at`, and closes the turns the
/// point cut.
fn plan<F: Fn(&str) -> (LoopId, LoopId)>(
    events: &[(u64, Event)],
    parent: SessionId,
    at: ForkPoint,
    fork: SessionId,
    loops: &mut LoopMap<F>,
) -> Result<Plan, ForkError> {
    let parent_main = events
        .iter()
        .find_map(|(_, e)| match e.kind {
            EventKind::SessionStarted { .. } => e.header.loop_id,
            _ => None,
        })
        .ok_or(ForkError::NotFound { session: parent })?;
    loops.parent_main = Some(parent_main);
    let cut = cut(events, parent, parent_main, at)?;
    let mut copies = Vec::new();
    let mut open: Vec<(LoopId, Open)> = Vec::new();
    let mut through_seq = 0;
    for (seq, event) in events.iter().take_while(|(seq, _)| *seq <= cut) {
        through_seq = *seq;
        let (Some(from), true) = (event.header.loop_id, is_history(&event.kind)) else {
            continue;
        };
        let loop_id = loops.get(from);
        track(&mut open, loop_id, event);
        let header = Header {
            id: treadle_event::EventId::new(),
            session: fork,
            loop_id: Some(loop_id),
            ..event.header.clone()
        };
        copies.push(Event::new(header, event.kind.clone()));
    }
    let copied = u32::try_from(copies.len()).unwrap_or(u32::MAX);
    let reason = format!("forked from session {parent} at {at:?}: this turn goes no further here");
    for (loop_id, turn) in open {
        let header = Header::in_loop(fork, loop_id)
            .with_turn(turn.turn)
            .with_cause(Cause::Input(turn.input));
        let kind = EventKind::TurnInterrupted {
            reason: reason.clone(),
            steps: turn.steps,
            usage: turn.usage,
        };
        copies.push(Event::new(header, kind));
    }
    let link = ForkLink {
        session: parent,
        at,
        through_seq,
        copied,
    };
    Ok(Plan {
        link,
        events: copies,
    })
}

/// The last journal seq of the parent that the fork's history covers.
fn cut(
    events: &[(u64, Event)],
    parent: SessionId,
    main: LoopId,
    at: ForkPoint,
) -> Result<u64, ForkError> {
    let mut main_events = events
        .iter()
        .filter(|(_, e)| e.header.loop_id == Some(main));
    let found = match at {
        ForkPoint::BeforeTurn(turn) => main_events
            .find(|(_, e)| {
                e.header.turn == Some(turn) && matches!(e.kind, EventKind::TurnStarted { .. })
            })
            .map(|(seq, _)| seq.saturating_sub(1)),
        ForkPoint::AfterStep(step) => main_events
            .find(|(_, e)| {
                e.header.step == Some(step) && matches!(e.kind, EventKind::StepDone { .. })
            })
            .map(|(seq, _)| *seq),
        ForkPoint::AfterTurn(turn) => {
            let mut of_turn = main_events.filter(|(_, e)| e.header.turn == Some(turn));
            if !of_turn
                .clone()
                .any(|(_, e)| matches!(e.kind, EventKind::TurnStarted { .. }))
            {
                None
            } else {
                let ended = of_turn.find(|(_, e)| e.kind.terminal().is_some());
                match ended {
                    Some((seq, _)) => Some(*seq),
                    None => {
                        return Err(ForkError::TurnNotEnded {
                            session: parent,
                            turn,
                        });
                    }
                }
            }
        }
    };
    found.ok_or(ForkError::NoSuchPoint {
        session: parent,
        at,
    })
}

/// Whether an event is part of a loop's committed history (what a restore rebuilds it from).
fn is_history(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::TurnStarted { .. } | EventKind::StepDone { .. } | EventKind::Compacted { .. }
    ) || kind.terminal().is_some()
}

/// Keeps count of the turns begun and not ended in the copied events.
fn track(open: &mut Vec<(LoopId, Open)>, loop_id: LoopId, event: &Event) {
    match (&event.kind, event.header.turn) {
        (EventKind::TurnStarted { input, .. }, Some(turn)) => {
            open.retain(|(l, _)| *l != loop_id);
            let turn = Open {
                turn,
                input: *input,
                steps: 0,
                usage: Usage::default(),
            };
            open.push((loop_id, turn));
        }
        (EventKind::StepDone { usage, .. }, _) => {
            if let Some((_, turn)) = open.iter_mut().find(|(l, _)| *l == loop_id) {
                turn.steps += 1;
                turn.usage += *usage;
            }
        }
        (kind, _) if kind.terminal().is_some() => open.retain(|(l, _)| *l != loop_id),
        _ => {}
    }
}
