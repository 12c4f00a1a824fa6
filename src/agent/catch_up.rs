//! What a restored session committed that the run's transcript does not show. A process
//! killed mid agent step had shown the step's calls live, but the run's event journal is
//! synced at the ends of model calls, so the tail of what it showed is gone; and a restored
//! session may go on (a parked agent step resumed) before the step's forwarder is
//! subscribed. The forwarder of a restored agent step therefore reads the session's journal
//! first and then follows it live ([`treadle_session::Session::subscribe_from`]: no gap, no
//! duplicate), and each committed model call (the session's `StepDone`) is the authority on
//! what was done: whatever of it was not shown (neither by the run's
//! transcript before the stop nor live here) is shown when it arrives, so that the
//! transcript has each committed call and result once, in the order they were made.
//!
//! A committed model call is turned into the events the live forwarder makes of one
//! (`super::forward`): the model's text as lines, each call, each result. Those the
//! transcript showed before the stop are matched by content, each match used once. A call a
//! stop caught between its intent and its result is said in a notice: it may have taken
//! effect, and `on_unfinished_effect:` decides what happens to it.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use treadle_event::{Block, Event, EventKind, Role};
use treadle_session::{GateKind, GateQuestion};

use super::observe::{AgentEvent, AgentObserver, preview};
use super::record::parse_arguments;

/// What a restored agent step's forwarder has shown, to show each committed event once.
pub(super) struct Shown {
    /// What the run's transcript showed of the agent step before the stop, as `(what, data)`,
    /// each entry used up by one match.
    before: Vec<(String, Value)>,
    /// The calls (`c` + id) and results (`r` + id) shown live by this forwarder.
    live: HashSet<String>,
    /// The journal's events are being read (not live yet): their text was never shown.
    reading: bool,
}

impl Shown {
    /// A forwarder starting on the session's journal, after `before`.
    pub(super) fn after(before: Vec<(String, Value)>) -> Self {
        Self {
            before,
            live: HashSet::new(),
            reading: true,
        }
    }

    /// Everything from here on is live.
    pub(super) fn caught_up(&mut self) {
        self.reading = false;
    }

    /// Whether live call `id` is to be shown now: not when it was shown already, here or
    /// (the same call) before the stop. Noted as shown either way.
    pub(super) fn call_started(&mut self, id: &str, event: &AgentEvent) -> bool {
        self.live.insert(format!("c{id}")) && !self.shown_before(event)
    }

    /// Whether the live result of call `id` is to be shown now: only once its call was
    /// (one whose start this forwarder missed is shown with its model call, in order).
    pub(super) fn call_completed(&mut self, id: &str, event: &AgentEvent) -> bool {
        self.live.contains(&format!("c{id}"))
            && self.live.insert(format!("r{id}"))
            && !self.shown_before(event)
    }

    /// Whether the transcript showed `event` before the stop (using that showing up).
    fn shown_before(&mut self, event: &AgentEvent) -> bool {
        let key = (event.what().to_owned(), event.data());
        match self.before.iter().position(|b| *b == key) {
            Some(at) => {
                self.before.remove(at);
                true
            }
            None => false,
        }
    }

    /// Shows what of a committed event (a model call, an effect gate) was not shown yet.
    pub(super) fn committed(&mut self, event: &Event, observer: &dyn AgentObserver) {
        for (id, shown) in self.events_of(event) {
            if let Some(id) = id
                && self.live.contains(&id)
            {
                continue;
            }
            if !self.shown_before(&shown) {
                observer.on_event(shown);
            }
        }
    }

    /// The events the live forwarder shows of one journaled event, each with the key it
    /// is noted under when shown live (`None`: text, shown live through the deltas).
    fn events_of(&self, event: &Event) -> Vec<(Option<String>, AgentEvent)> {
        match &event.kind {
            EventKind::StepDone { messages, .. } => {
                // Results carry only their call's id; the call, in the same model call, its tool.
                let tools: HashMap<&str, &str> = messages
                    .iter()
                    .flat_map(|m| m.tool_uses())
                    .map(|u| (u.id, u.name))
                    .collect();
                messages
                    .iter()
                    .flat_map(|m| self.of_message(m, &tools))
                    .collect()
            }
            EventKind::GateOpened { .. } => GateQuestion::from_event(event)
                .filter(|r| r.kind == GateKind::Effect)
                .map(|r| {
                    let notice = AgentEvent::Notice(format!(
                        "`{}` {} (call {}) was running when the process stopped: it may have taken effect; `on_unfinished_effect:` decides whether it runs again",
                        r.tool, r.arguments, r.call_id
                    ));
                    (None, notice)
                })
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A committed message as the forwarder shows it: text lines, then calls; results.
    fn of_message(
        &self,
        message: &treadle_event::Message,
        tools: &HashMap<&str, &str>,
    ) -> Vec<(Option<String>, AgentEvent)> {
        let mut out = Vec::new();
        if message.role == Role::Assistant && self.reading {
            let text = message.text_content();
            let mut lines: Vec<&str> = text.split('\n').collect();
            // The forwarder's line buffer: a text ending in a newline has no empty last line.
            if lines.last() == Some(&"") {
                lines.pop();
            }
            out.extend(
                lines
                    .into_iter()
                    .map(|l| (None, AgentEvent::Text(l.to_owned()))),
            );
        }
        for block in &message.content {
            match block {
                Block::ToolUse {
                    id,
                    name,
                    arguments,
                } => out.push((
                    Some(format!("c{id}")),
                    AgentEvent::ToolCall {
                        name: name.clone(),
                        arguments: parse_arguments(arguments),
                    },
                )),
                Block::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => out.push((
                    Some(format!("r{call_id}")),
                    AgentEvent::ToolResult {
                        name: tools
                            .get(call_id.as_str())
                            .copied()
                            .unwrap_or_default()
                            .to_owned(),
                        content: preview(content),
                        is_error: *is_error,
                    },
                )),
                Block::Text { .. } | Block::Reasoning { .. } => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;
    use treadle_event::{Header, Message, Usage};

    use super::*;

    fn model_call(id: &str, n: u32) -> Event {
        let call = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: format!("step {n}\n"),
                },
                Block::ToolUse {
                    id: id.to_owned(),
                    name: "charge".to_owned(),
                    arguments: format!("{{\"n\":{n}}}"),
                },
            ],
        };
        let result = Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: id.to_owned(),
                content: "ok".to_owned(),
                is_error: false,
            }],
        };
        Event {
            header: Header::session(treadle_event::SessionId::new()),
            kind: EventKind::StepDone {
                index: n,
                messages: vec![call, result].into(),
                usage: Usage::default(),
                model: String::new(),
            },
        }
    }

    fn shown(shown: &mut Shown, events: &[Event]) -> Vec<String> {
        let seen = Mutex::new(Vec::new());
        let observer = |e: AgentEvent| seen.lock().unwrap().push(e.summary());
        for e in events {
            shown.committed(e, &observer);
        }
        seen.into_inner().unwrap()
    }

    #[test]
    fn a_committed_model_call_shows_what_was_not_shown_before_or_live() {
        let before = vec![
            ("text".to_owned(), json!("step 0")),
            (
                "tool_call".to_owned(),
                json!({"name": "charge", "arguments": {"n": 0}}),
            ),
        ];
        let mut from = Shown::after(before);
        // Model call 0: its text and call were shown before the stop, its result was not.
        assert_eq!(shown(&mut from, &[model_call("a", 0)]), ["← charge: ok"]);
        from.caught_up();
        // Model call 1, live: its call was shown as it started, its result and text not again.
        let (call, result) = (
            AgentEvent::ToolCall {
                name: "charge".to_owned(),
                arguments: json!({"n": 1}),
            },
            AgentEvent::ToolResult {
                name: "charge".to_owned(),
                content: "ok".to_owned(),
                is_error: false,
            },
        );
        assert!(from.call_started("b", &call));
        assert!(from.call_completed("b", &result));
        assert!(shown(&mut from, &[model_call("b", 1)]).is_empty());
        // Model call 2: a result whose start was missed waits for its call, which shows both.
        assert!(!from.call_completed("c", &result));
        assert_eq!(
            shown(&mut from, &[model_call("c", 2)]),
            ["→ charge {\"n\":2}", "← charge: ok"]
        );
    }
}
