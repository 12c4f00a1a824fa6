//! The [`Session`] handle: subscribe, interrupt, answer gates, read history, shut down
//! (turns start with [`Session::turn`], in `turn_request.rs`).

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::runtime::RuntimeFlavor;
use treadle_event::{
    Cause, Event, EventFilter, EventKind, FailureCause, GateAnswer, InputId, LoopId, LoopScope,
    Message, ModelFailure, SessionId, Usage,
};

use crate::error::{GateError, RunError, SessionClosed, SubmitError};
use crate::hub::{CatchUp, CatchUpItem, Hub, Subscription};
use crate::inference::StructuredOutput;
use crate::journal::{Journal, JournalView, ReadError, SessionClaim};
use crate::protocol::{LoopMsg, TurnOptions};

/// A running conversation. Cheap to clone; every clone drives the same session.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

/// What a started session is made of; the builder assembles it.
pub(crate) struct SessionParts {
    pub id: SessionId,
    pub main_loop: LoopId,
    pub actor: ActorRef<LoopMsg>,
    /// Sub-agent loops, shut down with the session.
    pub children: Vec<ActorRef<LoopMsg>>,
    pub hub: Hub,
    pub journal: Journal,
    pub structured_output: StructuredOutput,
    /// The loops' claim on the journal; marked stopping when the last handle goes.
    pub claim: Weak<SessionClaim>,
}

type Inner = SessionParts;

impl Drop for SessionParts {
    /// The last handle is gone, so nobody can submit, answer or shut down any more: the
    /// session stops, and its loops release the journal once their turns have ended.
    ///
    /// In a multi-threaded Tokio runtime the drop waits for that, as `shutdown().await`
    /// would (for at most [`DROP_WAIT`], through `block_in_place`), so that returning from
    /// `main` leaves `SessionStopped` journaled and no operation cut off. Elsewhere (a
    /// current-thread runtime, no runtime) it cannot block the thread that drives the
    /// loops: it only asks them to stop.
    fn drop(&mut self) {
        if let Some(claim) = self.claim.upgrade() {
            claim.mark_stopping();
        }
        let actors: Vec<ActorRef<LoopMsg>> =
            self.children.iter().chain([&self.actor]).cloned().collect();
        let reason = "the last session handle was dropped";
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(stop_within(actors, reason)));
            }
            _ => {
                for actor in actors {
                    let _ = actor.cast(LoopMsg::Shutdown {
                        reason: reason.into(),
                        reply: None,
                    });
                }
            }
        }
    }
}

/// The longest dropping the last handle waits for the session to stop.
pub(crate) const DROP_WAIT: Duration = Duration::from_secs(5);

/// Stops `actors` in order and waits for each, or gives up after [`DROP_WAIT`]. The deadline
/// is a plain thread, not a Tokio timer: a drop may run while the runtime shuts down, when
/// its timers are gone (the loops are then gone too, and each call returns at once).
async fn stop_within(actors: Vec<ActorRef<LoopMsg>>, reason: &'static str) {
    let (expired, deadline) = futures::channel::oneshot::channel::<()>();
    // Dropped when the wait is over, which wakes the deadline thread at once.
    let (stopped, waiting) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::Builder::new()
        .name("treadle-drop-wait".into())
        .spawn(move || {
            if waiting.recv_timeout(DROP_WAIT) == Err(RecvTimeoutError::Timeout) {
                let _ = expired.send(());
            }
        });
    let stop = async {
        for actor in &actors {
            let _ = actor
                .call(
                    |reply| LoopMsg::Shutdown {
                        reason: reason.into(),
                        reply: Some(reply),
                    },
                    None,
                )
                .await;
        }
    };
    if timer.is_err() {
        // No thread for the deadline: ask, and do not wait.
        for actor in &actors {
            let _ = actor.cast(LoopMsg::Shutdown {
                reason: reason.into(),
                reply: None,
            });
        }
        return;
    }
    futures::pin_mut!(stop);
    let _ = futures::future::select(stop, deadline).await;
    drop(stopped);
}

/// How a turn ended, as [`TurnRequest::run`](crate::TurnRequest::run) reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    Done {
        text: String,
    },
    /// `failure` says whose failure it was, as `TurnFailed` journals it (`cause` is the
    /// name of an event's header field: the input or gate that led to it).
    Failed {
        error: String,
        failure: FailureCause,
        /// With [`FailureCause::Model`], how the endpoint failed.
        model: Option<ModelFailure>,
    },
    Interrupted {
        reason: String,
    },
}

/// The end of one turn: its outcome, the steps it committed and the tokens they spent.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    pub input: InputId,
    pub outcome: TurnOutcome,
    pub steps: u32,
    pub usage: Usage,
}

impl TurnReport {
    /// The final answer of a turn that ended with `TurnDone`; `None` for a failed or
    /// interrupted turn. The same as `answer().ok()`, which replaces it: the answer has
    /// one accessor, [`TurnReport::answer`].
    #[deprecated(
        note = "use answer(), a Result that says why there is no answer; answer().ok() for an Option"
    )]
    pub fn text(&self) -> Option<&str> {
        self.answer().ok()
    }

    /// The final answer, or why there is none as an error.
    pub fn answer(&self) -> Result<&str, TurnError> {
        match &self.outcome {
            TurnOutcome::Done { text } => Ok(text),
            TurnOutcome::Failed { error, failure, .. } => Err(TurnError::Failed {
                error: error.clone(),
                failure: *failure,
            }),
            TurnOutcome::Interrupted { reason } => Err(TurnError::Interrupted {
                reason: reason.clone(),
            }),
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.outcome, TurnOutcome::Done { .. })
    }

    /// The report a terminal event (or the cancellation of input `input`) makes, if
    /// `event` ends that input's turn.
    pub(crate) fn from_event(input: InputId, event: &Event) -> Option<TurnReport> {
        if let EventKind::InputCancelled {
            input: cancelled,
            reason,
        } = &event.kind
            && *cancelled == input
        {
            // Shutdown cancelled the input before it ran.
            let outcome = TurnOutcome::Failed {
                error: reason.clone(),
                failure: FailureCause::Other,
                model: None,
            };
            return Some(TurnReport {
                input,
                outcome,
                steps: 0,
                usage: Usage::default(),
            });
        }
        if event.header.cause != Some(Cause::Input(input)) {
            return None;
        }
        let (outcome, steps, usage) = match &event.kind {
            EventKind::TurnDone { text, steps, usage } => {
                (TurnOutcome::Done { text: text.clone() }, *steps, *usage)
            }
            EventKind::TurnFailed {
                error,
                steps,
                usage,
                failure,
                model,
            } => (
                TurnOutcome::Failed {
                    error: error.clone(),
                    failure: *failure,
                    model: *model,
                },
                *steps,
                *usage,
            ),
            EventKind::TurnInterrupted {
                reason,
                steps,
                usage,
            } => (
                TurnOutcome::Interrupted {
                    reason: reason.clone(),
                },
                *steps,
                *usage,
            ),
            _ => return None,
        };
        Some(TurnReport {
            input,
            outcome,
            steps,
            usage,
        })
    }
}

/// Why a turn gave no answer, from [`TurnReport::answer`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TurnError {
    #[error("{error}")]
    Failed {
        error: String,
        failure: FailureCause,
    },
    #[error("{reason}")]
    Interrupted { reason: String },
}

impl Session {
    pub(crate) fn from_parts(parts: SessionParts) -> Self {
        Session {
            inner: Arc::new(parts),
        }
    }

    pub(crate) fn structured_output(&self) -> StructuredOutput {
        self.inner.structured_output
    }

    pub fn id(&self) -> SessionId {
        self.inner.id
    }

    /// The loop of the main agent.
    pub fn main_loop(&self) -> LoopId {
        self.inner.main_loop
    }

    /// The session's journal, read-only: its reads ([`JournalView::read`], ...), never a
    /// write. Only the session's loop actor writes its history (rule 1); for live events
    /// use [`Session::subscribe`] or [`Session::subscribe_from`].
    pub fn journal(&self) -> &JournalView {
        &self.inner.journal
    }

    /// The one path every turn is submitted through ([`TurnRequest`]'s terminals, which
    /// [`Session::turn`] starts): the input and how its turn must answer, to the loop actor.
    ///
    /// [`TurnRequest`]: crate::TurnRequest
    pub(crate) async fn submit_with(
        &self,
        text: String,
        options: TurnOptions,
    ) -> Result<InputId, SubmitError> {
        match self
            .inner
            .actor
            .call(
                |reply| LoopMsg::Submit {
                    text,
                    options,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(CallResult::Success(result)) => result,
            _ => Err(SubmitError::Closed),
        }
    }

    /// Live events from now on. There is no replay: subscribe before you submit when the
    /// first event matters, or use [`Session::subscribe_from`].
    pub fn subscribe(&self, filter: EventFilter) -> Subscription {
        self.inner.hub.subscribe(filter)
    }

    /// Enduring events from journal sequence `from_seq` on, then a
    /// [`CatchUpItem::CaughtUp`](crate::CatchUpItem::CaughtUp) mark, then live events,
    /// with no gap and no duplicate.
    pub fn subscribe_from(&self, from_seq: u64, filter: EventFilter) -> Result<CatchUp, ReadError> {
        self.inner.hub.subscribe_from(from_seq, filter)
    }

    /// Interrupts the running turn, which ends with `TurnInterrupted`; its committed steps
    /// stay. Returns whether a turn was running. Queued inputs still run.
    pub async fn interrupt(&self) -> Result<bool, SessionClosed> {
        match self
            .inner
            .actor
            .call(|reply| LoopMsg::Interrupt { reply }, None)
            .await
        {
            Ok(CallResult::Success(interrupted)) => Ok(interrupted),
            _ => Err(SessionClosed),
        }
    }

    /// Answers an open permission gate (announced by an enduring `GateOpened` event).
    ///
    /// The answer is journaled as `GateResolved` before the waiting call learns it. An
    /// [`GateAnswer::ApproveAlways`] also approves later calls of the same tool for the rest
    /// of the session. The gate may belong to the main loop or to a sub-agent's loop.
    pub async fn respond_gate(
        &self,
        gate: treadle_event::GateId,
        answer: GateAnswer,
    ) -> Result<(), GateError> {
        let mut any_alive = false;
        for actor in std::iter::once(&self.inner.actor).chain(&self.inner.children) {
            let answer = answer.clone();
            let reply = actor
                .call(
                    |reply| LoopMsg::ResolveGate {
                        gate,
                        answer,
                        reply: Some(reply),
                    },
                    None,
                )
                .await;
            match reply {
                Ok(CallResult::Success(Err(GateError::NotOpen(_)))) => any_alive = true,
                Ok(CallResult::Success(result)) => return result,
                _ => {}
            }
        }
        Err(if any_alive {
            GateError::NotOpen(gate)
        } else {
            GateError::Closed
        })
    }

    /// The committed history of the main loop (the system prompt is configuration, not
    /// history, and is not included).
    pub async fn history(&self) -> Result<Vec<Message>, SessionClosed> {
        match self
            .inner
            .actor
            .call(|reply| LoopMsg::History { reply }, None)
            .await
        {
            Ok(CallResult::Success(history)) => Ok(history),
            _ => Err(SessionClosed),
        }
    }

    /// Submits through [`Session::submit_with`] and waits for the turn's report; the
    /// subscription is made first, so the end cannot be missed.
    pub(crate) async fn run_with(
        &self,
        input: String,
        options: TurnOptions,
    ) -> Result<TurnReport, RunError> {
        let filter = EventFilter {
            ephemeral: LoopScope::None,
            enduring: LoopScope::Only(vec![self.inner.main_loop]),
        };
        let mut events = self.inner.hub.subscribe_internal(filter);
        let input = self.submit_with(input, options).await?;
        while let Some(delivery) = events.next().await {
            let event = delivery?.event;
            if let Some(report) = TurnReport::from_event(input, &event) {
                return Ok(report);
            }
        }
        Err(RunError::Closed)
    }

    /// The report of the main loop's last turn: at once when it has ended, or when it ends
    /// if it is still running (a turn that [`SessionBuilder::restore`] resumed, waiting on
    /// an effect or permission gate). `None` when the loop has had no turn.
    ///
    /// [`SessionBuilder::restore`]: crate::SessionBuilder::restore
    pub async fn last_turn(&self) -> Result<Option<TurnReport>, RunError> {
        let filter = EventFilter {
            ephemeral: LoopScope::None,
            enduring: LoopScope::Only(vec![self.inner.main_loop]),
        };
        let mut events = self.subscribe_from(0, filter)?;
        let (mut last, mut report) = (None, None);
        while let Some(item) = events.next().await {
            if let CatchUpItem::Event(delivery) = item? {
                let event = &delivery.event;
                if let EventKind::TurnStarted { input, .. } = &event.kind {
                    (last, report) = (Some(*input), None);
                } else if let Some(input) = last
                    && report.is_none()
                {
                    report = TurnReport::from_event(input, event);
                }
            }
            // Past the journal: the last turn has ended, or there was none.
            if events.is_caught_up() && (last.is_none() || report.is_some()) {
                return Ok(report);
            }
        }
        Err(RunError::Closed)
    }

    /// Stops the session: interrupts the running turn, cancels queued inputs, records
    /// `SessionStopped` and ends every subscription. Safe to call more than once.
    pub async fn shutdown(&self) {
        // Sub-agents first: a delegation in flight then ends before the main loop's turn.
        for loop_actor in self.inner.children.iter().chain([&self.inner.actor]) {
            let reason = "shutdown".to_owned();
            let _ = loop_actor
                .call(
                    |reply| LoopMsg::Shutdown {
                        reason,
                        reply: Some(reply),
                    },
                    None,
                )
                .await;
        }
    }
}
