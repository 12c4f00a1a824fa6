//! The tools of a shadow step: each call whose name and arguments match a call of the
//! recorded step is answered with the recorded result; any other call runs the real tool,
//! whose workspace is the shadow step's scratch directory. A matching call of a tool that
//! writes a file (it names a write target) is answered from the recording too, and also made
//! in the scratch directory, so the files the step's asserts check are there.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use treadle_session::{Tool, ToolError};

use crate::agent::RecordedCall;

/// The recorded calls of one step, shared by its wrapped tools. Each recorded call answers
/// at most once; among equal calls, the earliest unused one answers.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    calls: Vec<RecordedCall>,
    used: Mutex<Vec<bool>>,
    /// How many calls were answered from the recording, and how many ran.
    counts: Mutex<(u32, u32)>,
}

impl Recording {
    pub(crate) fn new(calls: Vec<RecordedCall>) -> Self {
        let used = vec![false; calls.len()];
        Self {
            calls,
            used: Mutex::new(used),
            counts: Mutex::new((0, 0)),
        }
    }

    /// The recorded answer to `name(arguments)`, marking it used.
    fn answer(&self, name: &str, arguments: &Value) -> Option<&RecordedCall> {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let index = self
            .calls
            .iter()
            .enumerate()
            .position(|(i, c)| !used[i] && c.name == name && &c.arguments == arguments)?;
        used[index] = true;
        self.calls.get(index)
    }

    fn count(&self, replayed: bool) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if replayed {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }

    /// `(answered from the recording, run for real)`.
    pub(crate) fn counts(&self) -> (u32, u32) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Wraps every tool so that calls are answered from `recording` where they match.
pub(crate) fn wrap(tools: Vec<Arc<dyn Tool>>, recording: &Arc<Recording>) -> Vec<Arc<dyn Tool>> {
    tools
        .into_iter()
        .map(|inner| {
            Arc::new(Replayed {
                inner,
                recording: recording.clone(),
            }) as Arc<dyn Tool>
        })
        .collect()
}

struct Replayed {
    inner: Arc<dyn Tool>,
    recording: Arc<Recording>,
}

#[async_trait::async_trait]
impl Tool for Replayed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn ends_turn(&self) -> bool {
        self.inner.ends_turn()
    }

    fn touches(&self, arguments: &Value) -> treadle_session::Footprint {
        self.inner.touches(arguments)
    }

    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        if let Some(recorded) = self.recording.answer(self.inner.name(), &arguments) {
            self.recording.count(true);
            // A file write is also made in the scratch directory (its own result unused),
            // so that the step's `assert: { files }` sees what the recorded call wrote.
            if self.inner.name() == "write_file" || self.inner.name() == "edit_file" {
                let _ = self.inner.call(arguments).await;
            }
            return if recorded.is_error {
                Err(ToolError::new(recorded.result.clone()))
            } else {
                Ok(recorded.result.clone())
            };
        }
        self.recording.count(false);
        self.inner.call(arguments).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, arguments: Value, result: &str) -> RecordedCall {
        RecordedCall {
            name: name.into(),
            arguments,
            result: result.into(),
            is_error: false,
        }
    }

    #[test]
    fn each_recorded_call_answers_once_and_only_an_equal_call() {
        let recording = Recording::new(vec![
            call("read_file", json!({"path": "a"}), "one"),
            call("read_file", json!({"path": "a"}), "two"),
        ]);
        let a = json!({"path": "a"});
        assert_eq!(recording.answer("read_file", &a).unwrap().result, "one");
        assert_eq!(recording.answer("read_file", &a).unwrap().result, "two");
        assert!(recording.answer("read_file", &a).is_none());
        assert!(
            recording
                .answer("read_file", &json!({"path": "b"}))
                .is_none()
        );
        assert!(recording.answer("write_file", &a).is_none());
    }
}
