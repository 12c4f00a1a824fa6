//! The task that turns a session's event stream into [`AgentEvent`]s for an observer.
//!
//! Text arrives from the model in small pieces; the forwarder gathers it into whole lines,
//! so a transcript prints one line per line of the answer rather than one per piece. A
//! restored session's journal is read first, each committed event shown once
//! (`super::catch_up`).

use futures::StreamExt;
use treadle_event::{DeltaKind, EventKind};
use treadle_session::{CatchUpItem, Subscription};

use super::catch_up::Shown;
use super::hook_order::HookLines;
use super::observe::{AgentEvent, AgentObserver, preview};
use super::record::parse_arguments;
use super::timing::Timing;

/// Where a forwarder reads a session's events.
pub(crate) enum Events {
    /// A session started for the step: live.
    Live(Subscription),
    /// A restored session: its journal, then live, showing each committed event once
    /// (see `super::catch_up`).
    Restored(treadle_session::CatchUp, Shown),
}

/// Follows a session's events until the subscription ends, showing them to `observer`
/// with the command hooks' reports each beside its event (`hooks`). Returns the model the
/// endpoint last reported serving.
pub(crate) async fn forward(
    events: Events,
    hooks: &HookLines,
    observer: &dyn AgentObserver,
) -> Option<String> {
    let (mut events, mut shown) = match events {
        Events::Live(live) => (live.map(|d| d.map(CatchUpItem::Event)).boxed(), None),
        Events::Restored(read, shown) => (read.boxed(), Some(shown)),
    };
    let mut line = LineBuffer::default();
    let mut served = None;
    // Times are said only of what happens live: a restored session's journal is read
    // before it goes on, and its calls' times were said (or lost) by the process before.
    let mut timing = Timing::default();
    let mut live = shown.is_none();
    while let Some(item) = events.next().await {
        // A lost subscription only costs display: the outcome is read from the history.
        let Ok(item) = item else { break };
        let delivery = match item {
            CatchUpItem::Event(delivery) => delivery,
            CatchUpItem::CaughtUp { .. } => {
                if let Some(shown) = &mut shown {
                    shown.caught_up();
                }
                live = true;
                continue;
            }
        };
        if matches!(delivery.event.kind, EventKind::ToolCallStarted { .. }) {
            line.flush(observer);
        }
        hooks.before(&delivery.event.kind, observer);
        if live {
            // Before the forwarder's own handling, so a turn's prompt precedes its text.
            if matches!(delivery.event.kind, EventKind::StepDone { .. }) {
                line.flush(observer);
            }
            timing.see(&delivery.event.kind, delivery.event.header.at_ms, observer);
        }
        match &delivery.event.kind {
            EventKind::TokenDelta {
                kind: DeltaKind::Text,
                text,
                ..
            } => {
                observer.on_token(text);
                line.push(text, observer);
            }
            EventKind::ToolCallStarted {
                call_id,
                name,
                arguments,
            } => {
                line.flush(observer);
                let call = AgentEvent::ToolCall {
                    name: name.clone(),
                    arguments: parse_arguments(arguments),
                };
                if shown
                    .as_mut()
                    .is_none_or(|s| s.call_started(call_id, &call))
                {
                    observer.on_event(call);
                }
            }
            EventKind::ToolCallCompleted {
                call_id,
                name,
                content,
                is_error,
            } => {
                let result = AgentEvent::ToolResult {
                    name: name.clone(),
                    content: preview(content),
                    is_error: *is_error,
                };
                if shown
                    .as_mut()
                    .is_none_or(|s| s.call_completed(call_id, &result))
                {
                    observer.on_event(result);
                }
            }
            EventKind::StepDone { model, .. } => {
                line.flush(observer);
                if let Some(shown) = &mut shown {
                    shown.committed(&delivery.event, observer);
                }
                if !model.is_empty() {
                    served = Some(model.clone());
                }
            }
            EventKind::GateOpened { .. } => {
                if let Some(shown) = &mut shown {
                    shown.committed(&delivery.event, observer);
                }
            }
            kind if kind.terminal().is_some() => line.flush(observer),
            _ => {}
        }
        hooks.after(&delivery.event.kind, observer);
    }
    line.flush(observer);
    served
}

/// Gathers text pieces into lines.
#[derive(Default)]
struct LineBuffer(String);

impl LineBuffer {
    fn push(&mut self, text: &str, observer: &dyn AgentObserver) {
        self.0.push_str(text);
        while let Some(end) = self.0.find('\n') {
            let rest = self.0.split_off(end + 1);
            let mut done = std::mem::replace(&mut self.0, rest);
            done.truncate(end);
            observer.on_event(AgentEvent::Text(done));
        }
    }

    fn flush(&mut self, observer: &dyn AgentObserver) {
        if !self.0.is_empty() {
            observer.on_event(AgentEvent::Text(std::mem::take(&mut self.0)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn text_pieces_become_lines() {
        let seen = Mutex::new(Vec::new());
        let observer = |e: AgentEvent| seen.lock().unwrap().push(e);
        let mut buffer = LineBuffer::default();
        buffer.push("Hel", &observer);
        buffer.push("lo\nwor", &observer);
        buffer.push("ld\n\nbye", &observer);
        buffer.flush(&observer);
        let lines: Vec<String> = seen
            .into_inner()
            .unwrap()
            .into_iter()
            .map(|e| e.summary())
            .collect();
        assert_eq!(lines, ["Hello", "world", "", "bye"]);
    }
}
