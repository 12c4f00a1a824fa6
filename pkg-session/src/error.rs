//! Typed errors of the session API, one enum per operation.

use treadle_event::InputId;

use crate::hub::SubscriptionLost;
use crate::inference::{ClientError, MissingApiKey};
use crate::journal::{AppendError, JournalOpenError};

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "no model endpoint given: call .endpoint(\"http://host:port/v1\") on the builder, \
         or set OPENAI_BASE_URL for SessionBuilder::from_env()"
    )]
    MissingEndpoint,
    #[error(
        "no model given: call .model(\"name\") on the builder, or set OPENAI_MODEL for \
         SessionBuilder::from_env()"
    )]
    MissingModel,
    #[error(transparent)]
    MissingApiKey(#[from] MissingApiKey),
    #[error("cannot build the model client: {0}")]
    Client(#[from] ClientError),
    #[error(transparent)]
    Journal(#[from] JournalOpenError),
    #[error("cannot record the session start: {0}")]
    Append(#[from] AppendError),
    #[error("cannot start the loop actor: {0}")]
    Spawn(String),
}

/// Why an input was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(
        "input {input} rejected: {capacity} inputs already wait; submit again after a turn ends"
    )]
    QueueFull { input: InputId, capacity: usize },
    #[error("the session is shut down")]
    Closed,
    #[error("cannot journal the input: {0}")]
    Journal(#[from] AppendError),
}

/// Why a step group could not be committed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommitError {
    #[error("the turn is no longer the loop's running turn")]
    NotRunning,
    #[error("the loop actor stopped before the commit")]
    ActorGone,
    #[error("the journal refused the step: {0}")]
    Journal(#[from] AppendError),
}

/// The session's actor has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the session is shut down")]
pub struct SessionClosed;

/// Why [`TurnRequest::run`](crate::TurnRequest::run) (or another wait for a turn) returned no report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Lost(#[from] SubscriptionLost),
    #[error("the session shut down before the turn ended")]
    Closed,
    #[error("cannot read the session's turns from its journal: {0}")]
    Read(#[from] crate::journal::ReadError),
}

/// Why a gate answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(
        "gate {0} is not open: it was never opened here, or it was already answered or expired"
    )]
    NotOpen(treadle_event::GateId),
    #[error("the session is shut down")]
    Closed,
    /// The gate does not take this answer (a value that does not fit the question's
    /// schema, a value for a permission): nothing was journaled and the gate stays open.
    #[error("gate {gate} refused the answer and is still open: {reason}")]
    Refused {
        gate: treadle_event::GateId,
        reason: String,
    },
    /// The answer could not be made durable; the call was denied (fail closed).
    #[error("cannot journal the answer, so the call was denied: {0}")]
    Journal(#[from] AppendError),
}

/// Why an effect's intent or result, sent through the loop actor, was not journaled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error(transparent)]
    Journal(#[from] AppendError),
    #[error("the session stopped")]
    Stopped,
}

/// Why a gate could not be opened for a call: nobody could answer it, or the actor could
/// not journal it. The message is what the model (or the failed turn) is told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateOpenError {
    #[error(
        "{}: this call needs an answer and nobody can answer in this session ({question})",
        treadle_hook::APPROVAL_REQUIRED
    )]
    Headless { question: String },
    #[error(
        "{}: this call needs an answer and nobody can answer: the session has no on_gate \
         handler and no subscriber ({question})",
        treadle_hook::APPROVAL_REQUIRED
    )]
    Unseen { question: String },
    #[error("the gate could not be opened ({0})")]
    Journal(#[from] AppendError),
    #[error("the session stopped before the gate opened")]
    Stopped,
}

/// Why an answer does not answer a gate of its kind (the gate stays open).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WrongAnswer {
    #[error("a permission gate is answered approve, approve_always or deny, not with a value")]
    ValueForPermission,
    #[error(transparent)]
    Schema(#[from] crate::question::AnswerError),
    #[error("this gate asks a question: answer it with a value (answer), or deny it")]
    QuestionWithoutValue,
    #[error(
        "an unfinished effect is answered approve (run it again), answer (skip it with this \
         value as its result) or deny (fail the turn)"
    )]
    AlwaysForEffect,
}

/// Why a compaction did not happen (the turn goes on with its history as it was).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompactError {
    #[error("interrupted")]
    Interrupted,
    #[error("the summary request failed: {0}")]
    Summary(#[from] crate::inference::InferenceError),
    #[error("the model gave an empty summary")]
    EmptySummary,
    #[error(transparent)]
    Commit(#[from] CommitError),
}
