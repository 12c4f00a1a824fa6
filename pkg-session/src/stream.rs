//! [`Session::stream`]: one turn's events, ending with its report.

use std::sync::Arc;

use futures::StreamExt;
use treadle_event::{Cause, Event, EventFilter, InputId};

use crate::error::{RunError, SubmitError};
use crate::hub::Subscription;
use crate::session::{Session, TurnReport};

/// What [`TurnStream::next`] yields.
#[derive(Debug, Clone)]
pub enum TurnItem {
    /// An event of the turn: deltas, tool calls, gates, committed steps.
    Event(Arc<Event>),
    /// The turn ended; nothing follows.
    End(TurnReport),
}

/// The events of one turn, from [`Session::stream`], then its [`TurnReport`].
///
/// ```no_run
/// # async fn demo(session: treadle_session::Session) -> Result<(), Box<dyn std::error::Error>> {
/// use treadle_session::TurnItem;
/// use treadle_session::event::{DeltaKind, EventKind};
///
/// let mut turn = session.stream("Say hello.").await?;
/// while let Some(item) = turn.next().await {
///     match item? {
///         TurnItem::Event(event) => {
///             if let EventKind::TokenDelta { kind: DeltaKind::Text, text, .. } = &event.kind {
///                 print!("{text}");
///             }
///         }
///         TurnItem::End(report) => println!("\n{}", report.answer()?),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct TurnStream {
    events: Subscription,
    input: InputId,
    ended: bool,
}

impl TurnStream {
    /// The input this turn answers.
    pub fn input(&self) -> InputId {
        self.input
    }

    /// The next event of the turn, then [`TurnItem::End`], then `None`. An error when the
    /// subscription was lost (it says where to resume) or the session stopped first.
    pub async fn next(&mut self) -> Option<Result<TurnItem, RunError>> {
        if self.ended {
            return None;
        }
        while let Some(delivery) = self.events.next().await {
            let event = match delivery {
                Ok(delivery) => delivery.event,
                Err(lost) => {
                    self.ended = true;
                    return Some(Err(lost.into()));
                }
            };
            if let Some(report) = TurnReport::from_event(self.input, &event) {
                self.ended = true;
                return Some(Ok(TurnItem::End(report)));
            }
            if event.header.cause == Some(Cause::Input(self.input)) {
                return Some(Ok(TurnItem::Event(event)));
            }
        }
        self.ended = true;
        Some(Err(RunError::Closed))
    }
}

impl Session {
    /// Submits `input` and streams its turn: every event caused by it (text, reasoning and
    /// tool-argument deltas, tool calls, gates, committed steps), then the report. Nothing
    /// is missed: the stream subscribes before it submits.
    pub async fn stream(&self, input: impl Into<String>) -> Result<TurnStream, SubmitError> {
        let events = self.subscribe(EventFilter::all());
        let input = self.submit(input).await?;
        Ok(TurnStream {
            events,
            input,
            ended: false,
        })
    }
}
