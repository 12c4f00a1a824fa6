//! Sub-agents at run time: [`DelegateTool`], the tool through which a step's model calls
//! another agent (`tools: - agent: NAME`).
//!
//! Each call is a session of its own on the step's journal (its own journal stream), with
//! the sub-agent's own model, persona, tools and limits, working in the caller's directory,
//! and the request as its prompt. Its final answer is the tool's result (cut like any
//! tool's output); a failure is an error result the parent model reads, never the end of
//! the parent's turn.
//!
//! * Everything the sub-agent does is shown as [`AgentEvent::Nested`] under the parent
//!   step (its name, `a/b` for a sub-agent's own sub-agent), so the transcript and the run
//!   page show it nested. The events go through a channel that the parent step drains into
//!   its observer, because the tool outlives the borrow of that observer.
//! * Budgets: the sub-agent's tokens are charged to the parent step ([`Delegated`]), so the
//!   parent's ceiling covers its whole delegation tree. A call takes `percent` of what is
//!   left of the parent's tightest token budget (the smaller of that and the sub-agent's
//!   own); with nothing left the call is refused as a result, and the parent finishes
//!   without it. A parent without a token budget leaves the sub-agent its own.
//! * The sub-agent runs on a task of its own, cancelled when the parent step is cancelled
//!   or when the call is dropped (the parent's turn interrupted), so its session is always
//!   interrupted and shut down by its own runner.
//! * Dollars: a call likewise takes `percent` of what is left of the parent's tightest
//!   dollar budget (or its own, when smaller), and what it spent counts against the
//!   parent's. A sub-agent whose model has no price then cannot count its share and is
//!   refused its first model call (fail closed).
//! * A sub-agent granted `ask_human` asks through the parent step's answerer: its
//!   questions park under the parent step and are answered like the parent's, marked with
//!   the sub-agent's name.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use treadle_event::{ParentLink, SessionId};
use treadle_session::{Effect, Tool, ToolError};

use super::budget::{BudgetGuard, BudgetScope, Delegated, DollarBudget, TokenBudget};
use super::observe::{AgentEvent, AgentObserver};
use super::record::AgentOutcome;
use super::spec::AgentStep;
use super::spec::Delegate;
use crate::tools::{MAX_OUTPUT_BYTES, truncate};

/// The built-in tool through which a model asks a person.
const ASK_HUMAN: &str = "ask_human";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Request {
    /// The task for the sub-agent, with everything it needs to know.
    request: String,
}

/// Runs a sub-agent's step to its outcome, showing its events to the observer: the step
/// runner, handed in by the parent step (this module is below it).
pub(crate) type Runner = Arc<
    dyn Fn(
            AgentStep,
            Box<dyn AgentObserver>,
            CancellationToken,
        ) -> BoxFuture<'static, Result<AgentOutcome, RunFailure>>
        + Send
        + Sync,
>;

/// Why a sub-agent's step could not run: its own error, whatever the runner is.
pub(crate) type RunFailure = Box<dyn std::error::Error + Send + Sync>;

/// A CLI-backed agent has no runner for a sub-agent.
#[derive(Debug, thiserror::Error)]
#[error("a CLI agent cannot delegate to a sub-agent")]
pub(crate) struct NoDelegation;

/// What every delegation of one parent step shares.
#[derive(Clone)]
pub(crate) struct Parent {
    /// The parent step (its directory, environment and access are the sub-agent's too).
    pub(crate) step: AgentStep,
    pub(crate) run: Runner,
    /// Where the sub-agents' events go (drained into the parent's observer).
    pub(crate) events: UnboundedSender<AgentEvent>,
    pub(crate) cancel: CancellationToken,
    /// The sub-agents' tokens, charged to the parent.
    pub(crate) delegated: Arc<Delegated>,
    /// The budget guard of the parent's running session (set when it starts).
    pub(crate) guard: Arc<Mutex<Weak<BudgetGuard>>>,
    /// The parent's running session (set when it starts), for the child's parent link.
    pub(crate) session: Arc<Mutex<Option<SessionId>>>,
}

impl Parent {
    /// The parent's running session is `session`, guarded by `guard`.
    pub(crate) fn attach(&self, session: SessionId, guard: &Arc<BudgetGuard>) {
        *self.guard.lock().unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(guard);
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(session);
    }

    fn remaining(&self) -> Option<u64> {
        self.running_guard().and_then(|g| g.remaining())
    }

    fn remaining_usd(&self) -> Option<f64> {
        self.running_guard().and_then(|g| g.remaining_usd())
    }

    fn running_guard(&self) -> Option<Arc<BudgetGuard>> {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
    }
}

/// The tool of one sub-agent.
pub(crate) struct DelegateTool {
    pub(crate) delegate: Delegate,
    pub(crate) parent: Parent,
    schema: serde_json::Value,
}

impl DelegateTool {
    pub(crate) fn new(delegate: Delegate, parent: Parent) -> Self {
        let mut schema = serde_json::to_value(schemars::schema_for!(Request)).unwrap_or_default();
        // What the model needs is the object's shape; the document's own keys are noise.
        if let Some(map) = schema.as_object_mut() {
            map.remove("$schema");
            map.remove("title");
        }
        Self {
            delegate,
            parent,
            schema,
        }
    }

    /// The sub-agent's step for one request: its prompt, the parent's directory and
    /// access, and the budget share.
    fn child_step(&self, request: String) -> Result<AgentStep, ToolError> {
        let parent = &self.parent.step;
        let mut child = (*self.delegate.step).clone();
        child.prompt = request;
        child.dir = parent.dir.clone();
        child.env = parent.env.clone();
        child.pass_env = parent.pass_env.clone();
        child.confined = parent.confined;
        child.prices = parent.prices.clone();
        child.parent = (*self
            .parent
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .map(|session| ParentLink {
            session,
            tool: self.delegate.name.clone(),
        });
        // A sub-agent that may ask a person asks through the parent step's question path
        // (parked under the parent step, answered like any of its questions).
        if child.tools.iter().any(|t| t == ASK_HUMAN) {
            child.answerer = parent
                .answerer
                .clone()
                .map(|a| a.on_behalf_of(&self.delegate.name));
        }
        self.share_dollars(&mut child)?;
        if let Some(left) = self.parent.remaining() {
            let share = left * u64::from(self.delegate.percent) / 100;
            if share == 0 {
                return Err(ToolError::new(format!(
                    "cannot delegate to `{}`: {left} tokens are left of this step's budget, and a sub-agent takes {}% of that; finish without it",
                    self.delegate.name, self.delegate.percent
                )));
            }
            let own = child.budgets.iter().map(|b| b.limit).min();
            child.budgets = vec![TokenBudget {
                scope: BudgetScope::Step,
                limit: own.map_or(share, |own| own.min(share)),
                spent_before: 0,
            }];
        }
        Ok(child)
    }
}

impl DelegateTool {
    /// Gives the sub-agent `percent` of the dollars left of the parent's tightest dollar
    /// budget (or its own, when smaller); with none left the call is refused.
    fn share_dollars(&self, child: &mut AgentStep) -> Result<(), ToolError> {
        let Some(left) = self.parent.remaining_usd() else {
            return Ok(());
        };
        let share = left * f64::from(self.delegate.percent) / 100.0;
        if share <= 0.0 {
            return Err(ToolError::new(format!(
                "cannot delegate to `{}`: ${left:.4} is left of this step's dollar budget, and a sub-agent takes {}% of that; finish without it",
                self.delegate.name, self.delegate.percent
            )));
        }
        let own = child
            .controls
            .dollars
            .iter()
            .map(|b| b.limit)
            .min_by(f64::total_cmp);
        child.controls.dollars = vec![DollarBudget {
            scope: BudgetScope::Step,
            limit: own.map_or(share, |own| own.min(share)),
            spent_before: 0.0,
        }];
        Ok(())
    }
}

/// Sends a sub-agent's events to the parent, named.
struct Forward {
    agent: String,
    events: UnboundedSender<AgentEvent>,
}

impl AgentObserver for Forward {
    fn on_event(&self, event: AgentEvent) {
        let event = match event {
            AgentEvent::Nested { agent, event } => AgentEvent::Nested {
                agent: format!("{}/{agent}", self.agent),
                event,
            },
            other => AgentEvent::Nested {
                agent: self.agent.clone(),
                event: Box::new(other),
            },
        };
        // The parent step has ended when nobody receives: nothing left to show it to.
        let _ = self.events.send(event);
    }
}

#[async_trait::async_trait]
impl Tool for DelegateTool {
    fn name(&self) -> &str {
        &self.delegate.name
    }

    fn description(&self) -> &str {
        &self.delegate.description
    }

    fn parameters(&self) -> serde_json::Value {
        self.schema.clone()
    }

    // `touches` is the default, everything: a sub-agent works in the caller's directory
    // and may write there.

    fn effect(&self) -> Effect {
        // Whatever its tools do, it may do once only.
        Effect::Effectful
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        let name = self.delegate.name.clone();
        let request: Request = serde_json::from_value(arguments)
            .map_err(|e| ToolError::new(format!("{name} needs {{\"request\": \"...\"}}: {e}")))?;
        let child = self.child_step(request.request)?;
        let forward = Forward {
            agent: name.clone(),
            events: self.parent.events.clone(),
        };
        let cancel = self.parent.cancel.child_token();
        // Dropping the call (the parent's turn interrupted) cancels the sub-agent, whose
        // runner then interrupts and shuts down its session.
        let _stop = cancel.clone().drop_guard();
        let task = tokio::spawn((self.parent.run)(child, Box::new(forward), cancel));
        let outcome = match task.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                return Err(ToolError::new(format!(
                    "sub-agent `{name}` could not run: {e}"
                )));
            }
            Err(e) => return Err(ToolError::new(format!("sub-agent `{name}` stopped: {e}"))),
        };
        self.parent.delegated.charge(outcome.usage, outcome.cost);
        match outcome.status.error() {
            None => Ok(truncate(
                outcome.text,
                MAX_OUTPUT_BYTES,
                "ask the sub-agent for a shorter answer, or to write it to a file",
            )),
            Some(why) => Err(ToolError::new(format!("sub-agent `{name}` failed: {why}"))),
        }
    }
}
