//! Resuming a turn that a crash caught waiting on a permission gate.
//!
//! # Why a parked turn can be resumed exactly
//!
//! A batch authorizes every call (asking through gates, one gate at a time, in call order)
//! before any call of the batch executes. So while a gate of a step is open, no call of that
//! step has run, and nothing of the step is in the history. Every `GateOpened` carries the
//! step's staged assistant message (with all its tool uses), the step id and index, its
//! usage and model (`subject.resume`, see [`crate::gate`]). From the journal alone, restore
//! therefore knows the exact point the turn stood at: "run the batch of this message", with
//! the answers already given to earlier gates of the step.
//!
//! # What restore does with an in-flight turn
//!
//! * The journal of the turn ends with an open gate (a `GateOpened` with no `GateResolved`)
//!   in the main loop: the turn is **resumed**. It keeps its `TurnId`, `InputId` and the
//!   `StepId` of the parked step. Its open gate is registered again in the loop actor under
//!   its original `GateId`, so `Session::respond_gate(old_id, ..)` answers it. The turn task
//!   starts at the parked step's batch without streaming inference again: calls whose gate
//!   was already answered take that journaled answer, the call whose gate is open waits on
//!   it, calls not reached yet are authorized as usual. Then the step commits and the turn
//!   goes on normally; its terminal closes it, once.
//! * **Deadlines keep their recorded wall-clock instant** (`subject.deadline_at_ms`): a crash
//!   does not buy a gate more time. A gate whose deadline passed while the process was down
//!   is resolved `Expired` at restore, before the session accepts any answer, so the call is
//!   denied (rule 7) and the model reads `denied: no answer before the deadline`; the turn
//!   still resumes and ends normally. A gate with time left waits only for the rest of it.
//! * A restored **headless** session cannot answer anything: open gates are resolved
//!   `Deny { approval_required }` at restore, and the turn resumes with that denial.
//! * Otherwise (no open gate, a sub-agent's loop, or a journal written before gates carried
//!   `subject.resume`) the turn is closed with `TurnInterrupted`, after its open gates are
//!   resolved `Deny { canceled }` so no gate outlives its turn. A sub-agent's turn is not
//!   resumed because the parent call that delegated to it was executing at the crash, so
//!   the parent's turn is interrupted and nobody would read the child's answer.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use treadle_event::{
    Cause, Event, EventKind, GateAnswer, GateId, Header, LoopId, SessionId, StepId, Usage,
};
use treadle_hook::APPROVAL_REQUIRED;

use crate::context::BatchConfig;
use crate::gate::AdoptedGate;
use crate::hub::Hub;
use crate::journal::AppendError;
use crate::protocol::TurnCoords;
use crate::restore::{GateRecord, InFlight, Restored};
use crate::subject::{GateCall, GateKind, GateSubject, StagedStep};

/// What a call of a resumed batch finds about its permission.
pub(crate) enum PriorGate {
    /// Its gate was answered before the crash (or at restore): take that answer.
    Answered(GateAnswer),
    /// Its gate is open again: wait on it, until its recorded deadline.
    Open {
        gate: GateId,
        deadline_at_ms: u64,
        answer: oneshot::Receiver<GateAnswer>,
    },
}

/// What a resumed batch finds in the journal about its calls.
#[derive(Default)]
pub(crate) struct Prior {
    /// The gates of its calls, by call id and kind.
    pub gates: HashMap<(String, GateKind), PriorGate>,
    /// The journaled results of its effectful calls, by call id: `(content, is_error)`.
    pub results: HashMap<String, (String, bool)>,
}

/// The turn task's part of a resumed turn.
pub(crate) struct Resume {
    /// Steps the turn committed before the crash, and their tokens.
    pub steps: u32,
    pub usage: Usage,
    /// Tool calls of those steps, against the per-turn limit.
    pub tool_calls: u32,
    pub staged: StagedStep,
    pub prior: Prior,
}

/// A turn the loop actor restarts when it starts.
pub(crate) struct ResumedTurn {
    pub coords: TurnCoords,
    /// The turn's number in its loop (what `Payload::Turn` reports).
    pub index: u32,
    /// The text of the turn's input.
    pub input: String,
    pub gates: Vec<AdoptedGate>,
    pub turn: Resume,
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Settles every in-flight turn of a restored session: resumes the main loop's turn parked
/// on a gate, closes the others. Journals what it decides (expired, headless and canceled
/// gates, `TurnInterrupted`) before any actor exists, so it is the session's only writer.
/// Returns the turns to resume, by loop.
pub(crate) async fn settle(
    hub: &Hub,
    session: SessionId,
    restored: &mut Restored,
    batch: &BatchConfig,
) -> Result<HashMap<LoopId, ResumedTurn>, AppendError> {
    let main_loop = restored.main_loop;
    let headless = batch.headless;
    let mut resumed_turns = HashMap::new();
    for (loop_id, state) in restored.loops.iter_mut() {
        let Some(mut in_flight) = state.in_flight.take() else {
            continue;
        };
        let staged = (*loop_id == main_loop)
            .then(|| parked_step(&in_flight).or_else(|| effect_step(&in_flight)))
            .flatten();
        if let Some(staged) = &staged {
            let opened = Writer {
                hub,
                session,
                loop_id: *loop_id,
                in_flight: &in_flight,
            }
            .ask_about_effects(staged, batch)
            .await?;
            in_flight.gates.extend(opened);
        }
        let writer = Writer {
            hub,
            session,
            loop_id: *loop_id,
            in_flight: &in_flight,
        };
        match staged {
            Some(staged) => {
                let turn_index = state.turns_started.saturating_sub(1);
                let resumed = writer.resume(staged, turn_index, headless).await?;
                resumed_turns.insert(*loop_id, resumed);
            }
            None => writer.close().await?,
        }
    }
    Ok(resumed_turns)
}

/// The staged step the turn is parked on: the step of its open gates, read from their
/// subject. `None` when no gate is open, the open gates disagree on the step, or a subject
/// lacks `resume` (an older journal).
fn parked_step(in_flight: &InFlight) -> Option<StagedStep> {
    let mut open = in_flight.gates.iter().filter(|g| g.answer.is_none());
    let first = open.next()?;
    let staged = first.subject.as_ref()?.resume.clone()?;
    let same_step = open.all(|g| {
        g.step == Some(staged.step)
            && g.subject
                .as_ref()
                .and_then(|s| s.resume.as_ref())
                .map(|r| r.step)
                == Some(staged.step)
    });
    (same_step && first.step == Some(staged.step)).then_some(staged)
}

/// The step a crash caught running its effectful calls: the staged step of its intents.
fn effect_step(in_flight: &InFlight) -> Option<StagedStep> {
    in_flight.effects.iter().find_map(|e| e.staged.clone())
}

/// What a gate asks (a subject without a kind is a permission's).
fn kind_of(record: &GateRecord) -> GateKind {
    record
        .subject
        .as_ref()
        .map_or(GateKind::Permission, |s| s.kind)
}

/// The call ids a gate's subject covers.
fn call_ids(record: &GateRecord) -> Vec<String> {
    record
        .subject
        .iter()
        .flat_map(|subject| subject.call_ids().map(str::to_owned))
        .collect()
}

/// Journals restore's decisions about one in-flight turn.
struct Writer<'a> {
    hub: &'a Hub,
    session: SessionId,
    loop_id: LoopId,
    in_flight: &'a InFlight,
}

impl Writer<'_> {
    fn header(&self, step: Option<StepId>) -> Header {
        let header = Header::in_loop(self.session, self.loop_id)
            .with_turn(self.in_flight.turn)
            .with_cause(Cause::Input(self.in_flight.input));
        match step {
            Some(step) => header.with_step(step),
            None => header,
        }
    }

    async fn record(&self, event: Event) -> Result<(), AppendError> {
        self.hub.commit(event).await.map(|_| ())
    }

    async fn resolve(&self, record: &GateRecord, answer: GateAnswer) -> Result<(), AppendError> {
        let kind = EventKind::GateResolved {
            gate: record.gate,
            answer,
        };
        self.record(Event::new(self.header(record.step), kind))
            .await
    }

    /// Denies the open gates, then closes the turn with `TurnInterrupted`.
    async fn close(&self) -> Result<(), AppendError> {
        for record in self.in_flight.gates.iter().filter(|g| g.answer.is_none()) {
            let answer = GateAnswer::Deny {
                reason: "canceled: the process stopped and this turn could not be resumed".into(),
            };
            self.resolve(record, answer).await?;
        }
        let kind = EventKind::TurnInterrupted {
            reason: "the process stopped while this turn was in flight; closed at restore".into(),
            steps: self.in_flight.steps,
            usage: self.in_flight.usage,
        };
        self.record(Event::new(self.header(None), kind)).await
    }

    /// Opens an `effect` gate over every call of the staged step with an intent, no result
    /// and no gate yet (rule 11: it is not run again without an answer), and answers it at
    /// once when the session's policy decides. Returns the gates, as restore records them.
    async fn ask_about_effects(
        &self,
        staged: &StagedStep,
        batch: &BatchConfig,
    ) -> Result<Vec<GateRecord>, AppendError> {
        let mut opened = Vec::new();
        let unfinished = self
            .in_flight
            .effects
            .iter()
            .filter(|e| e.step == Some(staged.step) && e.result.is_none() && e.gate.is_none());
        for effect in unfinished {
            let gate = GateId::new();
            let call = GateCall {
                call_id: effect.call_id.clone(),
                name: effect.name.clone(),
                arguments: effect.arguments.clone(),
            };
            let deadline_at_ms = crate::gate::deadline_at_ms(batch.gate_deadline);
            let subject =
                GateSubject::for_kind(GateKind::Effect, call, None, deadline_at_ms, staged);
            let question = format!(
                "{} was running when the process stopped, so it may or may not have taken \
                 effect: run it again (approve), skip it with a result (answer), or fail the \
                 turn (deny)?",
                effect.name
            );
            let kind = EventKind::GateOpened {
                gate,
                question,
                subject: subject.to_value(),
            };
            self.record(Event::new(self.header(Some(staged.step)), kind))
                .await?;
            let mut record = GateRecord {
                gate,
                step: Some(staged.step),
                subject: Some(subject),
                answer: None,
            };
            if let Some(answer) = batch.unfinished_effects.answer(batch.headless) {
                self.resolve(&record, answer.clone()).await?;
                record.answer = Some(answer);
            }
            opened.push(record);
        }
        Ok(opened)
    }

    /// What restore answers a gate still open at the crash: `Expired` when its deadline
    /// passed, a headless denial, or `None` to open it again (journaled when decided).
    async fn decide_open(
        &self,
        record: &GateRecord,
        headless: bool,
    ) -> Result<Option<GateAnswer>, AppendError> {
        // A missing deadline cannot be trusted to still be ahead: fail closed.
        let deadline_at_ms = record.subject.as_ref().map_or(0, |s| s.deadline_at_ms);
        let decided = if deadline_at_ms <= now_ms() {
            Some(GateAnswer::Expired)
        } else if headless {
            Some(GateAnswer::Deny {
                reason: format!(
                    "{APPROVAL_REQUIRED}: the session was restored headless, so nobody can \
                     answer this gate"
                ),
            })
        } else {
            None
        };
        if let Some(answer) = &decided {
            self.resolve(record, answer.clone()).await?;
        }
        Ok(decided)
    }

    /// Builds the resumed turn: answered gates of the staged step become prior answers,
    /// open ones are expired, denied (headless) or handed to the actor to wait on again.
    async fn resume(
        &self,
        staged: StagedStep,
        index: u32,
        headless: bool,
    ) -> Result<ResumedTurn, AppendError> {
        let mut prior = Prior::default();
        let mut gates = Vec::new();
        for record in &self.in_flight.gates {
            if record.step != Some(staged.step) {
                continue;
            }
            let kind = kind_of(record);
            let answered = match &record.answer {
                Some(answer) => Some(answer.clone()),
                None => match self.decide_open(record, headless).await? {
                    Some(answer) => Some(answer),
                    None => {
                        let (tx, rx) = oneshot::channel();
                        let subject = record.subject.as_ref();
                        gates.push(AdoptedGate {
                            gate: record.gate,
                            step: staged.step,
                            tools: subject.map(|s| s.scope.tools.clone()).unwrap_or_default(),
                            kind,
                            human: subject.and_then(|s| s.human.clone()),
                            answer: tx,
                        });
                        // A gate covers one call (the batch asks call by call).
                        if let Some(call) = call_ids(record).into_iter().next() {
                            let open = PriorGate::Open {
                                gate: record.gate,
                                deadline_at_ms: subject.map_or(0, |s| s.deadline_at_ms),
                                answer: rx,
                            };
                            prior.gates.insert((call, kind), open);
                        }
                        None
                    }
                },
            };
            if let Some(answer) = answered {
                for call in call_ids(record) {
                    prior
                        .gates
                        .insert((call, kind), PriorGate::Answered(answer.clone()));
                }
            }
        }
        for effect in &self.in_flight.effects {
            if effect.step == Some(staged.step)
                && let Some(result) = &effect.result
            {
                prior.results.insert(effect.call_id.clone(), result.clone());
            }
        }
        Ok(ResumedTurn {
            coords: TurnCoords {
                turn: self.in_flight.turn,
                input: self.in_flight.input,
            },
            index,
            input: self.in_flight.input_text.clone(),
            gates,
            turn: Resume {
                steps: self.in_flight.steps,
                usage: self.in_flight.usage,
                tool_calls: self.in_flight.tool_calls,
                staged,
                prior,
            },
        })
    }
}
