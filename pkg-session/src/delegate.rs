//! Sub-agents: loops of the same session that the main agent delegates to through a tool.
//!
//! A sub-agent has its own system prompt, tools and step limit, and its own loop actor and
//! history. Its events reach the session's subscribers under its loop id. The tokens it
//! spends are charged to the parent step that delegated, and interrupting the parent
//! interrupts it.

use std::sync::{Arc, Mutex, PoisonError};

use ractor::ActorRef;
use ractor::rpc::CallResult;
use schemars::JsonSchema;
use serde::Deserialize;
use treadle_event::{Cause, EventFilter, EventKind, LoopId, LoopScope, SessionId, Usage};

use crate::hub::Hub;
use crate::protocol::{LoopMsg, TurnOptions};
use crate::tool::{Tool, ToolError, schema_of};

/// A sub-agent the main agent may delegate to. It becomes a tool named after it.
///
/// ```
/// use treadle_session::SubAgent;
///
/// let reviewer = SubAgent::new("reviewer", "Reviews a diff and lists problems.")
///     .system_prompt("You review code. Be specific.")
///     .max_steps(8);
/// assert_eq!(reviewer.name(), "reviewer");
/// ```
pub struct SubAgent {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) system: Option<String>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) max_steps: u32,
}

impl SubAgent {
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            system: None,
            tools: Vec::new(),
            max_steps: 20,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn system_prompt(mut self, text: impl Into<String>) -> Self {
        self.system = Some(text.into());
        self
    }

    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = steps;
        self
    }
}

/// The loop id of a session's sub-agent: derived from the session and the sub-agent's
/// name, so a restored session finds the same loop in its journal.
pub(crate) fn loop_id(session: SessionId, name: &str) -> LoopId {
    let namespace = uuid::Uuid::from_bytes(session.to_bytes());
    LoopId::from_bytes(*uuid::Uuid::new_v5(&namespace, name.as_bytes()).as_bytes())
}

#[derive(Deserialize, JsonSchema)]
struct Delegation {
    /// The task for the sub-agent, with everything it needs to know.
    task: String,
}

/// The tool through which the parent loop delegates to a sub-agent.
pub(crate) struct DelegateTool {
    pub name: String,
    pub description: String,
    pub child: ActorRef<LoopMsg>,
    pub child_loop: LoopId,
    pub hub: Hub,
    /// The parent loop's account of delegated tokens.
    pub charge_to: Arc<Mutex<Usage>>,
}

/// Interrupts the child if the delegation is dropped before it ends, which is what
/// happens when the parent's turn is interrupted mid-batch.
struct CancelOnDrop {
    child: Option<ActorRef<LoopMsg>>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = child.cast(LoopMsg::Cancel);
        }
    }
}

#[async_trait::async_trait]
impl Tool for DelegateTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> serde_json::Value {
        schema_of::<Delegation>()
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        let delegation: Delegation = serde_json::from_value(arguments).map_err(|e| {
            ToolError::new(format!("{} needs {{\"task\": \"...\"}}: {e}", self.name))
        })?;
        // Subscribe before submitting: the child's terminal must not slip past.
        let mut events = self.hub.subscribe_internal(EventFilter {
            ephemeral: LoopScope::None,
            enduring: LoopScope::Only(vec![self.child_loop]),
        });
        let task = delegation.task;
        // Armed before the submit: if this call is dropped (the parent interrupted) while
        // the submit is in flight, the Cancel queues behind the Submit in the child's
        // mailbox and still stops the turn it starts.
        let mut guard = CancelOnDrop {
            child: Some(self.child.clone()),
        };
        let submitted = self
            .child
            .call(
                |reply| LoopMsg::Submit {
                    text: task,
                    options: TurnOptions::default(),
                    reply,
                },
                None,
            )
            .await;
        let input = match submitted {
            Ok(CallResult::Success(Ok(input))) => input,
            Ok(CallResult::Success(Err(error))) => {
                // Nothing of ours runs in the child: leave its running turn alone.
                guard.child = None;
                return Err(ToolError::new(format!("{}: {error}", self.name)));
            }
            _ => {
                guard.child = None;
                return Err(ToolError::new(format!(
                    "sub-agent {} is not running",
                    self.name
                )));
            }
        };
        while let Some(delivery) = events.next().await {
            let Ok(delivery) = delivery else {
                break;
            };
            if delivery.event.header.cause != Some(Cause::Input(input)) {
                continue;
            }
            let (result, usage) = match &delivery.event.kind {
                EventKind::TurnDone { text, usage, .. } => (Ok(text.clone()), *usage),
                EventKind::TurnFailed { error, usage, .. } => (
                    Err(ToolError::new(format!(
                        "sub-agent {} failed: {error}",
                        self.name
                    ))),
                    *usage,
                ),
                EventKind::TurnInterrupted { reason, usage, .. } => (
                    Err(ToolError::new(format!(
                        "sub-agent {} was interrupted: {reason}",
                        self.name
                    ))),
                    *usage,
                ),
                _ => continue,
            };
            guard.child = None;
            *self
                .charge_to
                .lock()
                .unwrap_or_else(PoisonError::into_inner) += usage;
            return result;
        }
        guard.child = None;
        Err(ToolError::new(format!(
            "sub-agent {} stopped before it answered",
            self.name
        )))
    }
}
