//! An agent step whose session is restored instead of started: a worker took the step over
//! from one that stopped (`crate::dist::takeover`), and the session goes on from what the
//! first one committed.
//!
//! * The gates the restore left open (an `effect` gate over a call that was running at the
//!   stop, a permission gate the turn was parked on) are asked as the step's own questions,
//!   through the same answerer as the gates the session opens itself ([`answer_gate`]), and
//!   answered in the session.
//! * The step's first turn is the turn the restore resumed, or the one that had ended; a
//!   turn the restore closed (it was asking the model at the stop) is followed by one more
//!   turn telling the model to go on, with the committed history kept. No model call of a
//!   committed step is made again.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;
use treadle_event::EventKind;
use treadle_session::{
    GateAnswer, GateKind, GateQuestion, RunError, Session, TurnOutcome, TurnReport,
};

use super::controls::{Question, QuestionKind, StepControls};
use super::spec::{AgentStep, Answerer};

/// What the model is told when the turn in flight at the stop could not be resumed.
pub(super) const CONTINUE: &str = "The machine that was running this conversation stopped, and you are continuing it on another. Everything above happened already. Continue the task from where it stopped.";

/// The answer to one gate of the step's session: a question for a person goes to the
/// step's answerer, anything else (a permission, an effect caught by a stop) to its asker.
pub(super) async fn answer_gate(
    controls: &StepControls,
    answerer: Option<&Answerer>,
    request: GateQuestion,
) -> GateAnswer {
    if let Some(question) = request.human {
        return match answerer {
            Some(answerer) => (answerer.ask)(question).await,
            None => GateAnswer::deny("nobody answers questions in this step"),
        };
    }
    let kind = match request.kind {
        GateKind::Effect => QuestionKind::Effect,
        _ => QuestionKind::Permission,
    };
    if kind == QuestionKind::Permission && !controls.may_ask() {
        return GateAnswer::deny("nobody answers permissions in this step");
    }
    // The step's person can approve or refuse; the library's question also offers a value.
    let message = match kind {
        QuestionKind::Effect => format!(
            "`{}` was running when the worker holding this step stopped, so it may or may not \
             have taken effect: approve to run it again, reject to fail the step",
            request.tool
        ),
        _ => request.reason,
    };
    let answer = controls.ask(Question { kind, message }).await;
    if answer.approved {
        GateAnswer::Approve
    } else {
        let comment = answer
            .comment
            .map_or_else(String::new, |c| format!(": {c}"));
        GateAnswer::deny(format!("refused by {}{comment}", answer.by))
    }
}

/// The questions of a restored session's open gates, asked while it runs; dropped (the
/// step ended first), they stop waiting.
pub(super) struct OpenGates(Vec<tokio::task::JoinHandle<()>>);

impl OpenGates {
    /// A started session's: none.
    pub(super) fn none() -> Self {
        Self(Vec::new())
    }
}

impl Drop for OpenGates {
    fn drop(&mut self) {
        for question in &self.0 {
            question.abort();
        }
    }
}

/// Asks the gates the restore of `session` left open, each on a task of its own, and
/// answers them in the session.
pub(super) fn answer_open_gates(
    session: &Session,
    step: &AgentStep,
) -> Result<OpenGates, RunError> {
    let events = session.journal().read(session.id(), 0, None)?;
    let resolved: HashSet<_> = events
        .iter()
        .filter_map(|(_, e)| match &e.kind {
            EventKind::GateResolved { gate, .. } => Some(*gate),
            _ => None,
        })
        .collect();
    let open = events
        .iter()
        .filter_map(|(_, e)| GateQuestion::from_event(e))
        .filter(|r| !resolved.contains(&r.gate));
    let asked = open
        .map(|request| {
            let session = session.clone();
            let (controls, answerer) = (step.controls.clone(), step.answerer.clone());
            tokio::spawn(async move {
                let gate = request.gate;
                let answer = answer_gate(&controls, answerer.as_ref(), request).await;
                if let Err(e) = session.respond_gate(gate, answer).await {
                    tracing::warn!("answering gate {gate} of a restored session: {e}");
                }
            })
        })
        .collect();
    Ok(OpenGates(asked))
}

/// The restored step's first turn: the report of the session's last turn once it ends
/// (the turn restore resumed), or of one more turn with [`CONTINUE`] when the restore had
/// to close it or none had started; `cancel` interrupts it.
pub(super) async fn first_turn(
    session: &Session,
    prompt: &str,
    cancel: &CancellationToken,
) -> Result<TurnReport, RunError> {
    let last = tokio::select! {
        last = session.last_turn() => last?,
        () = cancel.cancelled() => {
            let _ = session.interrupt().await;
            session.last_turn().await?
        }
    };
    match last {
        Some(report) if !matches!(report.outcome, TurnOutcome::Interrupted { .. }) => Ok(report),
        Some(_) => super::interrupt::run_turn(session, CONTINUE, cancel).await,
        None => super::interrupt::run_turn(session, prompt, cancel).await,
    }
}
