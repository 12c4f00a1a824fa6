//! `DenyTools`: the smallest policy, a guard that refuses tool calls by name.

use std::collections::BTreeSet;

use crate::call::{HookCall, Payload};
use crate::hook::{Decision, Hook};

/// Denies every [`ToolCall`](crate::Operation::ToolCall) whose tool name is in a set, with
/// one fixed reason. Everything else is allowed.
///
/// Under rule 6 a denied call is not an error of the turn: the reason becomes the tool
/// result the model reads, so word it for the model.
///
/// ```
/// use treadle_hook::DenyTools;
///
/// let guard = DenyTools::new(["shell", "write_file"], "this agent is read-only");
/// assert!(guard.denies("shell"));
/// assert!(!guard.denies("read_file"));
/// ```
#[derive(Debug, Clone)]
pub struct DenyTools {
    tools: BTreeSet<String>,
    reason: String,
}

impl DenyTools {
    pub fn new<I, S>(tools: I, reason: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tools: tools.into_iter().map(Into::into).collect(),
            reason: reason.into(),
        }
    }

    /// Whether a call to `tool` is denied.
    pub fn denies(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }
}

#[async_trait::async_trait]
impl Hook for DenyTools {
    fn name(&self) -> &str {
        "deny_tools"
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        match &call.payload {
            Payload::ToolCall { name, .. } if self.denies(name) => {
                Decision::deny(self.reason.clone())
            }
            _ => Decision::Allow,
        }
    }
}
