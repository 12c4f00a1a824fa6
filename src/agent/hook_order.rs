//! [`HookLines`]: where a command hook's report goes in a step's transcript, the same in
//! every run.
//!
//! A hook reports on the session's task, through a channel of its own, while the
//! forwarder reads the session's events from their subscription: two streams, and which
//! one the step's task reads first is a matter of timing. So a report is not shown when it
//! arrives but anchored to the session event it belongs beside: a tool hook's to its call
//! (the guard's, `pre_tool_use`, just before the call's line; the others, such as
//! `post_tool_use`, just after its result), any other hook's before the next event shown.
//! Both anchors are safe to wait for: the session runs a call's guard hooks before it
//! publishes the call's start and its other hooks before it publishes the result, so a
//! call's reports are in the channel by the time the forwarder reads its events.

use std::sync::Mutex;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use treadle_event::EventKind;
use treadle_hook::HookReport;

use super::hooks::transcript_lines;
use super::observe::AgentObserver;

/// The hook reports of a step's sessions not shown yet.
pub(crate) struct HookLines {
    queue: Mutex<Queue>,
}

struct Queue {
    arriving: UnboundedReceiver<HookReport>,
    /// Arrived, in their order, waiting for their anchor.
    held: Vec<HookReport>,
}

impl HookLines {
    /// The queue, and the sender its hooks report into.
    pub(crate) fn new() -> (UnboundedSender<HookReport>, Self) {
        let (sender, arriving) = unbounded_channel();
        let queue = Queue {
            arriving,
            held: Vec::new(),
        };
        (
            sender,
            Self {
                queue: Mutex::new(queue),
            },
        )
    }

    /// Shows what goes before the session event `kind`: the reports tied to no call, and
    /// when `kind` starts a call, that call's guard reports.
    pub(crate) fn before(&self, kind: &EventKind, observer: &dyn AgentObserver) {
        let started = match kind {
            EventKind::ToolCallStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        };
        self.show(observer, |report| match report.call_id.as_deref() {
            None => true,
            Some(id) => Some(id) == started && report.event.is_guard(),
        });
    }

    /// Shows what goes after the session event `kind`: when it completes a call, the
    /// call's reports left (those of hooks that ran after it).
    pub(crate) fn after(&self, kind: &EventKind, observer: &dyn AgentObserver) {
        if let EventKind::ToolCallCompleted { call_id, .. } = kind {
            self.show(observer, |report| {
                report.call_id.as_deref() == Some(call_id.as_str())
            });
        }
    }

    /// Shows every report left, in its order (the session ended: no anchor is to come).
    pub(crate) fn rest(&self, observer: &dyn AgentObserver) {
        self.show(observer, |_| true);
    }

    /// Takes what arrived, then shows the held reports `due` picks, keeping the others.
    fn show(&self, observer: &dyn AgentObserver, due: impl Fn(&HookReport) -> bool) {
        let shown: Vec<HookReport> = {
            // A panic elsewhere while holding the lock leaves plain data: go on with it.
            let mut queue = self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while let Ok(report) = queue.arriving.try_recv() {
                queue.held.push(report);
            }
            let (now, later) = std::mem::take(&mut queue.held)
                .into_iter()
                .partition(|r| due(r));
            queue.held = later;
            now
        };
        for event in shown.iter().flat_map(transcript_lines) {
            observer.on_event(event);
        }
    }
}
