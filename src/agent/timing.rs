//! When each model call of an agent step began, spoke first and ended, read from the
//! session's own event stamps (`Header::at_ms`), for the run page's per-turn latency, time
//! to first token and tokens per second.
//!
//! The session has no event for a model call's start: a call starts when its turn starts
//! (`TurnStarted`) or when the model call before it was committed (its `StepDone`, after
//! its tools ran). It ends at its first tool call, or at its own `StepDone` when it called
//! no tool.

use treadle_event::EventKind;

use super::observe::{AgentEvent, AgentObserver, ModelCall};

/// Follows one session's events and says each model call's times when it commits.
#[derive(Debug, Default)]
pub(super) struct Timing {
    started: Option<u64>,
    first_token: Option<u64>,
    tools_at: Option<u64>,
}

impl Timing {
    /// Takes one event stamped `at`; shows the prompt of a turn, the times of a call.
    pub(super) fn see(&mut self, kind: &EventKind, at: u64, observer: &dyn AgentObserver) {
        match kind {
            EventKind::TurnStarted { message, .. } => {
                *self = Self {
                    started: Some(at),
                    ..Self::default()
                };
                observer.on_event(AgentEvent::Prompt {
                    role: "user".to_owned(),
                    text: message.text_content(),
                });
            }
            EventKind::TokenDelta { .. } => {
                self.first_token.get_or_insert(at);
            }
            EventKind::ToolCallStarted { .. } => {
                self.tools_at.get_or_insert(at);
            }
            EventKind::StepDone {
                index,
                usage,
                model,
                ..
            } => {
                observer.on_event(AgentEvent::ModelCall(ModelCall {
                    index: *index,
                    started_ms: self.started,
                    first_token_ms: self.first_token,
                    ended_ms: self.tools_at.unwrap_or(at),
                    prompt_tokens: usage.prompt_tokens,
                    completion_tokens: usage.completion_tokens,
                    model: model.clone(),
                }));
                *self = Self {
                    started: Some(at),
                    ..Self::default()
                };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use treadle_event::{DeltaKind, InputId, Message, Usage};

    use super::*;

    #[test]
    fn a_call_runs_from_its_turn_to_its_first_tool_and_the_next_from_the_last_commit() {
        let seen = Mutex::new(Vec::new());
        let observer = |e: AgentEvent| seen.lock().unwrap().push(e);
        let mut t = Timing::default();
        let delta = EventKind::TokenDelta {
            kind: DeltaKind::Text,
            index: None,
            text: "x".into(),
        };
        let done = |index| EventKind::StepDone {
            index,
            messages: Vec::new().into(),
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 40,
                cached_tokens: 0,
            },
            model: "m".into(),
        };
        let started = EventKind::TurnStarted {
            input: InputId::new(),
            message: Message::user("go"),
        };
        t.see(&started, 1_000, &observer);
        t.see(&delta, 1_300, &observer);
        t.see(&delta, 1_400, &observer);
        let call = EventKind::ToolCallStarted {
            call_id: "c".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        };
        t.see(&call, 1_500, &observer);
        t.see(&done(0), 1_900, &observer);
        t.see(&delta, 2_200, &observer);
        t.see(&done(1), 2_600, &observer);
        let seen = seen.into_inner().unwrap();
        let calls: Vec<&ModelCall> = seen
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ModelCall(c) => Some(c),
                _ => None,
            })
            .collect();
        assert!(matches!(&seen[0], AgentEvent::Prompt { text, .. } if text == "go"));
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (
                calls[0].started_ms,
                calls[0].first_token_ms,
                calls[0].ended_ms
            ),
            (Some(1_000), Some(1_300), 1_500)
        );
        assert_eq!(
            (
                calls[1].started_ms,
                calls[1].first_token_ms,
                calls[1].ended_ms
            ),
            (Some(1_900), Some(2_200), 2_600)
        );
    }
}
