//! [`TurnRequest::stream`]: one turn's events, ending with its report.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::{Stream, StreamExt};
use treadle_event::{Cause, DeltaKind, Event, EventFilter, EventKind, InputId};

use crate::error::{RunError, SubmitError};
use crate::hub::Subscription;
use crate::session::TurnReport;
use crate::turn_request::TurnRequest;

/// What [`TurnStream::next`] yields. The accessors pick out what most programs print
/// (text as it streams, tool calls and results, the report); [`TurnItem::event`] gives
/// any other event.
#[derive(Debug, Clone)]
pub enum TurnItem {
    /// An event of the turn: deltas, tool calls, gates, committed steps.
    Event(Arc<Event>),
    /// The turn ended; nothing follows.
    End(TurnReport),
}

/// A tool call as the turn starts it ([`TurnItem::tool_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolCallView<'a> {
    pub call_id: &'a str,
    pub name: &'a str,
    /// The arguments as the model wrote them (JSON text, repaired if it was malformed).
    pub arguments: &'a str,
}

/// A tool call's result as the model will read it ([`TurnItem::tool_result`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolResultView<'a> {
    pub call_id: &'a str,
    pub name: &'a str,
    pub content: &'a str,
    /// The tool failed, or the call was denied or refused; `content` says why.
    pub is_error: bool,
}

impl TurnItem {
    /// A piece of the answer's text, as it streams.
    pub fn text_delta(&self) -> Option<&str> {
        self.delta(DeltaKind::Text)
    }

    /// A piece of the model's reasoning, for models that stream it.
    pub fn reasoning_delta(&self) -> Option<&str> {
        self.delta(DeltaKind::Reasoning)
    }

    /// A tool call, when the turn starts running it.
    pub fn tool_call(&self) -> Option<ToolCallView<'_>> {
        match &self.event()?.kind {
            EventKind::ToolCallStarted {
                call_id,
                name,
                arguments,
            } => Some(ToolCallView {
                call_id,
                name,
                arguments,
            }),
            _ => None,
        }
    }

    /// A tool call's result, when the call has ended.
    pub fn tool_result(&self) -> Option<ToolResultView<'_>> {
        match &self.event()?.kind {
            EventKind::ToolCallCompleted {
                call_id,
                name,
                content,
                is_error,
            } => Some(ToolResultView {
                call_id,
                name,
                content,
                is_error: *is_error,
            }),
            _ => None,
        }
    }

    /// The event, for any item but the end.
    pub fn event(&self) -> Option<&Event> {
        match self {
            TurnItem::Event(event) => Some(event),
            TurnItem::End(_) => None,
        }
    }

    /// The turn's report, for the last item.
    pub fn report(&self) -> Option<&TurnReport> {
        match self {
            TurnItem::End(report) => Some(report),
            TurnItem::Event(_) => None,
        }
    }

    fn delta(&self, wanted: DeltaKind) -> Option<&str> {
        match &self.event()?.kind {
            EventKind::TokenDelta { kind, text, .. } if *kind == wanted => Some(text),
            _ => None,
        }
    }
}

/// The events of one turn, from [`TurnRequest::stream`], then its [`TurnReport`]. A
/// [`futures::Stream`], and [`TurnStream::next`] works without importing `StreamExt`.
///
/// ```no_run
/// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
/// let mut turn = session.turn("Say hello.").stream().await?;
/// while let Some(item) = turn.next().await {
///     let item = item?;
///     if let Some(text) = item.text_delta() {
///         print!("{text}");
///     }
///     if let Some(report) = item.report() {
///         println!("\n{}", report.answer()?);
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
        StreamExt::next(self).await
    }
}

impl Stream for TurnStream {
    type Item = Result<TurnItem, RunError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            let event = match ready!(this.events.poll_next_unpin(cx)) {
                Some(Ok(delivery)) => delivery.event,
                Some(Err(lost)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(lost.into())));
                }
                None => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(RunError::Closed)));
                }
            };
            if let Some(report) = TurnReport::from_event(this.input, &event) {
                this.ended = true;
                return Poll::Ready(Some(Ok(TurnItem::End(report))));
            }
            if event.header.cause == Some(Cause::Input(this.input)) {
                return Poll::Ready(Some(Ok(TurnItem::Event(event))));
            }
        }
    }
}

impl<C> TurnRequest<'_, C> {
    /// Submits the input and streams its turn: every event caused by it (text, reasoning
    /// and tool-argument deltas, tool calls, gates, committed steps), then the report.
    /// Nothing is missed: the stream subscribes before it submits.
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// let mut turn = session.turn("Say hello.").stream().await?;
    /// while let Some(item) = turn.next().await {
    ///     if let Some(text) = item?.text_delta() {
    ///         print!("{text}");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn stream(self) -> Result<TurnStream, SubmitError> {
        let events = self.session.subscribe(EventFilter::all());
        let input = self.submit().await?;
        Ok(TurnStream {
            events,
            input,
            ended: false,
        })
    }
}
