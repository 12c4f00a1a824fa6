//! An agent step's session moves with its step: the worker holding the step's lease mirrors
//! each event its session journals to the run's events stream, and a worker that takes the
//! step over rebuilds its own journal from them and restores the session (the library's one
//! restore path) instead of starting afresh.
//!
//! * The holder's lease fence ([`super::lease`]) publishes each event once it is journaled
//!   and before the session acts on it, to `treadle.events.<attempt id>.session` with
//!   `Nats-Msg-Id: <attempt id>.<event id>` (a publish retried after an outage is stored once),
//!   and waits for JetStream's acknowledgement: an effectful call's intent is in the stream
//!   before the call runs.
//! * A worker that takes the step reads those events back in stream order, appends to its
//!   state file's journal the ones it lacks (by event id), and names the session to restore:
//!   the last one the step started itself (a sub-agent's session names its parent). Restore
//!   then keeps the committed history, asks no model again for committed steps, and opens an
//!   `effect` gate over a call that has an intent and no result.

use async_nats::jetstream::context::Context;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::RawMessageErrorKind;
use treadle_session::Journal;
use treadle_session::event::{Event, EventKind, SessionId};

use super::DistError;
use super::bus::{Bus, EVENTS_STREAM, retrying};

/// Why the session of a step taken over cannot be rebuilt from its mirrored events.
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    /// A mirrored event does not parse (written by another version of treadle?).
    #[error("a session event of the step (stream seq {seq}) does not parse: {source}")]
    Event {
        /// Its sequence number in the events stream.
        seq: u64,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The local journal cannot be read.
    #[error("cannot rebuild the step's journal: {0}")]
    Read(#[source] treadle_session::journal::ReadError),
    /// The events cannot be imported into the local journal.
    #[error("cannot rebuild the step's journal: {0}")]
    Import(#[source] treadle_session::ImportError),
}

/// The subject a step's session events are mirrored to (inside the run's events stream,
/// outside the subject its followers read).
pub fn subject(attempt_id: &str) -> String {
    format!("treadle.events.{attempt_id}.session")
}

/// Why a session event could not be mirrored (retried until the lease is lost).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MirrorError {
    /// The event does not encode.
    #[error("encoding the event: {0}")]
    Encode(#[from] serde_json::Error),
    /// The stream did not take it.
    #[error("{0}")]
    Publish(#[from] async_nats::jetstream::context::PublishError),
}

/// Publishes one session event of attempt `attempt_id` and waits for the stream to store it.
pub(crate) async fn publish(
    js: &Context,
    attempt_id: &str,
    event: &Event,
) -> Result<(), MirrorError> {
    let body = serde_json::to_vec(event)?;
    let id = format!("{attempt_id}.{}", event.id());
    let message = PublishMessage::build()
        .payload(bytes::Bytes::from(body))
        .message_id(&id);
    js.send_publish(subject(attempt_id), message).await?.await?;
    Ok(())
}

/// The session events mirrored for attempt `attempt_id`, in the order they were stored.
pub(crate) async fn mirrored(bus: &Bus, attempt_id: &str) -> Result<Vec<Event>, DistError> {
    let subject = subject(attempt_id);
    let stream = retrying("opening the events stream", || {
        bus.js.get_stream(EVENTS_STREAM)
    })
    .await;
    let mut events = Vec::new();
    let mut from = 1;
    loop {
        // A cluster coming back answers "temporarily unavailable" for a while: that pauses
        // the takeover, as NATS being away does, instead of failing the step.
        let next = retrying("reading the step's session events", || {
            let (stream, subject) = (&stream, subject.clone());
            async move {
                match stream
                    .raw_message_builder()
                    .sequence(from)
                    .next_by_subject(subject)
                    .send()
                    .await
                {
                    Ok(m) => Ok(Some(m)),
                    Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
        let Some(message) = next else {
            return Ok(events);
        };
        let event = serde_json::from_slice::<Event>(&message.payload).map_err(|source| {
            TakeoverError::Event {
                seq: message.sequence,
                source,
            }
        })?;
        events.push(event);
        from = message.sequence + 1;
    }
}

/// Imports into `journal` the `events` it lacks (by event id, in their order; the session is
/// not live here yet, so the import is allowed), and names the
/// session to restore: the last session the step started itself. `None` when no session
/// was started (nothing to restore).
pub(crate) async fn adopt(
    journal: &Journal,
    events: Vec<Event>,
) -> Result<Option<SessionId>, DistError> {
    let mut session = None;
    let mut missing = Vec::new();
    for event in events {
        if let EventKind::SessionStarted { parent: None, .. } = &event.kind {
            session = Some(event.header.session);
        }
        // A worker restarted on the same state file already has what it wrote itself.
        if journal
            .seq_of(event.id())
            .map_err(TakeoverError::Read)?
            .is_none()
        {
            missing.push(event);
        }
    }
    journal
        .import(missing)
        .await
        .map_err(TakeoverError::Import)?;
    Ok(session)
}
