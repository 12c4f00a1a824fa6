//! Gates: a tool call parked until someone answers, or its deadline. A gate asks for a
//! permission, a person's answer to an `ask_human` question (see [`crate::human`]) or what
//! to do with an effect a crash interrupted (see `effect.rs`); its [`GateKind`] says which
//! answers it takes.
//!
//! # How a gate runs
//!
//! When a tool-call guard answers [`Decision::Ask`](treadle_hook::Decision::Ask), the batch
//! asks the loop actor to open a gate. The actor (the loop's only journal writer) journals an
//! enduring `GateOpened`, keeps the gate as pending, and the call waits. An answer comes in
//! through [`Session::respond_gate`](crate::Session::respond_gate), which goes to the same
//! actor: it journals `GateResolved` first, then hands the answer to the waiting call. When
//! the deadline passes first, the batch asks the actor to resolve the gate `Expired`, which
//! denies. A gate still open when its turn ends (an interrupt, a shutdown) is resolved
//! `Deny { reason: "canceled: ..." }` before the turn's terminal event, so the journal never
//! holds a gate whose turn is over and that nobody closed.
//!
//! # Journal shape (for restore)
//!
//! `GateOpened { gate, question, subject }`, with the turn and step in the header; the
//! subject is a [`GateSubject`](crate::GateSubject) (its JSON shape is documented there).
//!
//! `subject.resume` is the step's staged assistant message (all its tool uses), its id,
//! index, usage and model: enough for restore to run the step's batch again without asking
//! the model, when a crash caught the gate open (see `resume.rs`). `deadline_at_ms`
//! is a wall-clock instant that a restore keeps: downtime counts against it.
//!
//! `GateResolved { gate, answer }` where `answer` is a [`GateAnswer`]. An `ApproveAlways`
//! approves every tool named in the gate's `subject.scope.tools` for the rest of the session;
//! [`Approvals::from_events`] rebuilds that set from a journal's events. A gate opened with
//! no `GateResolved` after it was still open at a crash; restore opens it again under the
//! same id (or resolves it, when its deadline passed or its turn cannot resume).

use std::collections::HashMap;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use treadle_event::{Event, EventKind, GateAnswer, GateId, Header, StepId, TurnId};

use crate::context::LoopContext;
use crate::error::GateError;
use crate::protocol::{GateOpen, TurnCoords};
use crate::question::HumanQuestion;
use crate::subject::GateKind;

/// An open gate the loop actor takes over at restore, under its original id.
pub(crate) struct AdoptedGate {
    pub gate: GateId,
    pub step: StepId,
    pub tools: Vec<String>,
    pub kind: GateKind,
    pub human: Option<HumanQuestion>,
    pub answer: oneshot::Sender<GateAnswer>,
}

struct Pending {
    coords: TurnCoords,
    step: StepId,
    tools: Vec<String>,
    /// Which answers the gate takes, and the question a value must fit.
    kind: GateKind,
    human: Option<HumanQuestion>,
    answer: oneshot::Sender<GateAnswer>,
}

/// The open gates of one loop. Owned by the loop actor, so opening, answering, expiring and
/// closing a gate are serialized with every other journal write of the loop.
#[derive(Default)]
pub(crate) struct Gates {
    pending: HashMap<GateId, Pending>,
}

impl Gates {
    /// Journals `GateOpened` and keeps the gate pending.
    pub(crate) async fn open(
        &mut self,
        ctx: &LoopContext,
        request: GateOpen,
    ) -> Result<(), crate::journal::AppendError> {
        let tools = request.subject.scope.tools.clone();
        let (kind, human) = (request.subject.kind, request.subject.human.clone());
        let header = ctx.turn_header(request.coords, Some(request.step));
        let opened = EventKind::GateOpened {
            gate: request.gate,
            question: request.question,
            subject: request.subject.to_value(),
        };
        ctx.record(header, opened).await?;
        self.pending.insert(
            request.gate,
            Pending {
                coords: request.coords,
                step: request.step,
                tools,
                kind,
                human,
                answer: request.answer,
            },
        );
        Ok(())
    }

    /// Takes over a gate that was open when the process stopped, under its original id:
    /// its `GateOpened` is already journaled, so nothing is written.
    pub(crate) fn adopt(&mut self, coords: TurnCoords, gate: AdoptedGate) {
        self.pending.insert(
            gate.gate,
            Pending {
                coords,
                step: gate.step,
                tools: gate.tools,
                kind: gate.kind,
                human: gate.human,
                answer: gate.answer,
            },
        );
    }

    /// Journals `GateResolved`, remembers an `ApproveAlways`, then wakes the waiting call.
    /// An answer the gate does not take (a value that does not fit a question's schema, say)
    /// is refused with the reason: nothing is journaled and the gate stays open.
    pub(crate) async fn resolve(
        &mut self,
        ctx: &LoopContext,
        gate: GateId,
        answer: GateAnswer,
    ) -> Result<(), GateError> {
        let pending = self.pending.get(&gate).ok_or(GateError::NotOpen(gate))?;
        if let Err(wrong) = pending.kind.admits(pending.human.as_ref(), &answer) {
            let reason = wrong.to_string();
            return Err(GateError::Refused { gate, reason });
        }
        let pending = self.pending.remove(&gate).ok_or(GateError::NotOpen(gate))?;
        let header = ctx.turn_header(pending.coords, Some(pending.step));
        let kind = EventKind::GateResolved {
            gate,
            answer: answer.clone(),
        };
        if let Err(error) = ctx.record(header, kind).await {
            // An answer that is not durable is not given: the call is refused.
            let _ = pending.answer.send(GateAnswer::Deny {
                reason: format!("the answer could not be journaled ({error})"),
            });
            return Err(error.into());
        }
        if answer == GateAnswer::ApproveAlways {
            for tool in &pending.tools {
                ctx.batch.approvals.insert(tool.clone());
            }
        }
        // The call may have stopped waiting (interrupted); the answer is journaled anyway.
        let _ = pending.answer.send(answer);
        Ok(())
    }

    /// Closes every gate still open in `turn`, denying it, before the turn's terminal.
    pub(crate) async fn close_turn(&mut self, ctx: &LoopContext, turn: TurnId) {
        let open: Vec<GateId> = self
            .pending
            .iter()
            .filter(|(_, pending)| pending.coords.turn == turn)
            .map(|(gate, _)| *gate)
            .collect();
        for gate in open {
            let answer = GateAnswer::Deny {
                reason: "canceled: the turn ended before the gate was answered".into(),
            };
            if let Err(error) = self.resolve(ctx, gate, answer).await {
                tracing::error!(%error, %gate, "could not close a gate of an ended turn");
            }
        }
    }
}

/// Whether a subscriber outside the session would see a `GateOpened` with this header: if
/// not (and there is no `on_gate` handler), nobody can answer the gate.
pub(crate) fn announced(ctx: &LoopContext, header: Header, gate: GateId, question: &str) -> bool {
    let probe = Event::new(
        header,
        EventKind::GateOpened {
            gate,
            question: question.to_owned(),
            subject: serde_json::Value::Null,
        },
    );
    ctx.hub.watched(&probe)
}

/// The wall-clock instant `deadline` from now, in milliseconds since the Unix epoch.
pub(crate) fn deadline_at_ms(deadline: Duration) -> u64 {
    SystemTime::now()
        .checked_add(deadline)
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or(u64::MAX)
}
