//! [`StepControls`]: what a pipeline puts around an agent step's session besides its tools
//! and prompt: permission rules on tool calls, a typed output, a confidence floor for the
//! verdict and where a decision below it escalates, dollar budgets, and the [`Asker`] that
//! puts a question to a person.
//!
//! The agent module only asks through the [`Asker`] trait; the executor supplies one that
//! parks the question in the run's approval mailbox (`crate::run::approval`), so a
//! permission `ask` and an escalation are answered with `treadle approve` / `treadle reject`
//! like an approval step. Without an asker every question is refused (fail closed).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use treadle_hook::{Action, Policy, Rule};

use super::budget::{BudgetScope, DollarBudget};
use super::verdict::VERDICT_TOOL;
use crate::pipeline::ResolvedModel;

/// What a person is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionKind {
    /// A tool call a `permissions:` rule says to ask about.
    Permission,
    /// A verdict given with less confidence than `min_confidence:`.
    Escalation,
    /// An effectful tool call that was running when the worker holding its session
    /// stopped: run it again (approve) or fail the step (refuse)?
    Effect,
}

impl QuestionKind {
    /// Lower-case name, as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Permission => "permission",
            Self::Escalation => "escalation",
            Self::Effect => "effect",
        }
    }
}

/// A question for a person.
#[derive(Debug, Clone)]
pub struct Question {
    /// Why it is asked.
    pub kind: QuestionKind,
    /// The text the person reads (the tool call, or the verdict with the model's note).
    pub message: String,
}

/// A person's answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// Whether it was approved.
    pub approved: bool,
    /// Who or what answered (a user name, `timeout`, `headless`).
    pub by: String,
    /// What they said, if anything.
    pub comment: Option<String>,
}

impl Answered {
    /// The answer when nobody can be asked.
    pub fn refused(by: impl Into<String>) -> Self {
        Self {
            approved: false,
            by: by.into(),
            comment: None,
        }
    }
}

/// Puts questions to a person and waits for the answer.
#[async_trait::async_trait]
pub trait Asker: Send + Sync {
    /// Asks `question` and waits for the answer (or the deadline, or cancellation).
    async fn ask(&self, question: Question) -> Answered;
}

/// Where a verdict below the confidence floor goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Escalation {
    /// To a person, as an approval of the verdict.
    Human,
    /// To another agent's (stronger) model, which decides the step again; if it too is
    /// below the floor, to a person.
    Agent {
        /// The agent's name.
        name: String,
        /// Its model.
        model: Box<ResolvedModel>,
    },
}

impl fmt::Display for Escalation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Human => f.write_str("a person"),
            Self::Agent { name, .. } => write!(f, "agent `{name}`"),
        }
    }
}

/// The confidence a verdict needs, and where it goes below it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfidenceFloor {
    /// The least confidence, 0 to 1.
    pub min: f64,
    /// Where a decision below it goes.
    pub escalate_to: Escalation,
}

/// The agent's answer as JSON, checked against a schema and written to a file.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedOutput {
    /// The JSON Schema.
    pub schema: Value,
    /// The output directory's name (relative to the step directory).
    pub output: String,
}

/// Everything [`StepControls`] holds; `Default` is a step with none of them.
#[derive(Clone, Default)]
pub struct StepControls {
    /// Rules on tool calls (`permissions:` on the agent).
    pub permissions: Option<Policy>,
    /// `output_schema:`.
    pub output: Option<TypedOutput>,
    /// `min_confidence:` with `escalate_to:`.
    pub confidence: Option<ConfidenceFloor>,
    /// Dollar budgets (the step's or agent's, the job's).
    pub dollars: Vec<DollarBudget>,
    /// Who answers questions; `None`: every question is refused.
    pub asker: Option<Arc<dyn Asker>>,
    /// Wraps the step's granted tools before the session gets them (a shadow run answers
    /// calls from a recording this way); `None`: the tools as granted.
    pub wrap_tools: Option<ToolWrapper>,
    /// Admits each write of the step's session: a worker holds the step's session only
    /// while it holds the step's lease (`crate::dist::lease`); `None`: always.
    pub fence: Option<Arc<dyn treadle_session::WriteFence>>,
    /// The session to restore instead of starting one: a step a worker took over from one
    /// that stopped (`crate::dist::takeover`); `None`: a fresh session.
    pub resume: Option<treadle_session::event::SessionId>,
    /// The session and point to fork and run on instead of starting a session (a forked
    /// run's step, `crate::run::exec::forked`); `None`: a fresh session.
    pub fork: Option<(
        treadle_session::event::SessionId,
        treadle_session::ForkPoint,
    )>,
    /// Told the id of the step's session once it is started (or restored), before its
    /// first model call, off the async threads: the executor keeps it in the state file
    /// so that a resume restores that session. Sub-agents' and an escalation's sessions
    /// are not told. `None`: nobody keeps it.
    pub on_session: Option<SessionNoted>,
    /// With [`StepControls::resume`], on a run going on where an earlier process stopped
    /// (`crate::run`'s continued steps): the step's events the run's transcript already
    /// shows, as `(what, data)`. What the restored session committed beyond them is shown
    /// first (see `super::catch_up`). `None`: nothing is shown again (a worker's takeover,
    /// whose events the server journaled as they came).
    pub shown: Option<Arc<Vec<(String, serde_json::Value)>>>,
    /// The agent's command hooks (`hooks:`, with those of `defaults:`).
    pub hooks: super::hooks::StepHooks,
}

/// Called with the id of an agent step's session (see [`StepControls::on_session`]).
pub type SessionNoted = Arc<dyn Fn(treadle_session::event::SessionId) + Send + Sync>;

/// A function from the granted tools to the tools the session gets.
pub type ToolWrapper = Arc<
    dyn Fn(Vec<Arc<dyn treadle_session::Tool>>) -> Vec<Arc<dyn treadle_session::Tool>>
        + Send
        + Sync,
>;

impl fmt::Debug for StepControls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepControls")
            .field("permissions", &self.permissions)
            .field("output", &self.output)
            .field("confidence", &self.confidence)
            .field("dollars", &self.dollars)
            .field("asker", &self.asker.is_some())
            .field("wrap_tools", &self.wrap_tools.is_some())
            .field("fence", &self.fence)
            .field("resume", &self.resume)
            .field("fork", &self.fork)
            .field("on_session", &self.on_session.is_some())
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl StepControls {
    /// The policy the session runs with: the agent's rules, with the verdict tool always
    /// allowed first (a decision the step asked for is never a permission question).
    pub fn policy(&self) -> Option<Policy> {
        let mut policy = self.permissions.clone()?;
        policy
            .rules
            .insert(0, Rule::new(VERDICT_TOOL, Action::Allow));
        Some(policy)
    }

    /// Whether some rule (or the default), or a `pre_tool_use` command hook, may ask a
    /// person.
    pub fn may_ask(&self) -> bool {
        self.hooks.may_ask()
            || self.permissions.as_ref().is_some_and(|p| {
                p.rules.iter().any(|r| r.action == Action::Ask) || p.default == Some(Action::Ask)
            })
    }

    /// Asks a person, or refuses when nobody can be asked.
    pub async fn ask(&self, question: Question) -> Answered {
        match &self.asker {
            Some(asker) => asker.ask(question).await,
            None => Answered::refused("nobody (no one can answer in this run)"),
        }
    }

    /// What of the controls the step's cache key hashes: what changes the answer (the
    /// rules, the schema, the confidence floor); not the budgets, which only bound it.
    /// `None` when the step has none of them, so other steps' keys stay as they were.
    pub fn key_view(&self) -> Option<Value> {
        if self.permissions.is_none() && self.output.is_none() && self.confidence.is_none() {
            return None;
        }
        Some(serde_json::json!({
            "permissions": self.permissions,
            "output_schema": self.output.as_ref().map(|o| serde_json::json!({"output": o.output, "schema": o.schema})),
            "min_confidence": self.confidence.as_ref().map(|c| c.min),
            "escalate_to": self.confidence.as_ref().map(|c| c.escalate_to.to_string()),
        }))
    }
}

/// Gathers the controls of a pipeline's agent step: the agent's `permissions:`, the step's
/// `output_schema:`, `min_confidence:` / `escalate_to:` (an agent named there is resolved
/// here), and the smaller of the agent's and the step's `budget: { dollars }`.
pub fn from_pipeline(
    loaded: &crate::pipeline::Loaded,
    call: &crate::pipeline::AgentCall,
) -> Result<StepControls, super::BuildError> {
    let agent: &crate::pipeline::Agent = &call.def;
    use crate::pipeline::agent_call::EscalateTo;
    use crate::pipeline::model::{self, process_env};

    let confidence = match &call.min_confidence {
        Some(min) => {
            let escalate_to = match call.escalate_to.as_ref().map(|t| &t.value) {
                None | Some(EscalateTo::Human) => Escalation::Human,
                Some(EscalateTo::Agent(stronger)) => {
                    let model = model::resolve(&stronger.source, stronger.name.pos, &process_env)?;
                    Escalation::Agent {
                        name: stronger.name.value.clone(),
                        model: Box::new(model),
                    }
                }
            };
            Some(ConfidenceFloor {
                min: min.value,
                escalate_to,
            })
        }
        None => None,
    };
    let dollars = [&agent.budget, &call.budget]
        .into_iter()
        .filter_map(|b| b.as_ref().and_then(|b| b.dollars))
        .min_by(f64::total_cmp)
        .map(|limit| DollarBudget {
            scope: BudgetScope::Step,
            limit,
            spent_before: 0.0,
        })
        .into_iter()
        .collect();
    Ok(StepControls {
        permissions: agent.permissions.as_ref().map(|p| p.value.clone()),
        output: call.output_schema.as_ref().map(|o| TypedOutput {
            schema: o.value.schema.clone(),
            output: o.value.output.clone(),
        }),
        confidence,
        dollars,
        asker: None,
        wrap_tools: None,
        fence: None,
        resume: None,
        fork: None,
        on_session: None,
        shown: None,
        hooks: super::hooks::StepHooks::read(loaded, agent),
    })
}
