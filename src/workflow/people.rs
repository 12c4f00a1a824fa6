//! The calls of a workflow that wait for people or record a branch: [`Flow::approval`]
//! (assignees, a quorum, a deadline and what it does), [`Flow::human_input`] (a typed
//! answer), [`Flow::decision`] (a typed agent answer that asks a person below its
//! confidence), and [`Flow::when`] / [`Flow::when_dynamic`] / [`Flow::skip`] (a labelled
//! branch in the run's records). Each builds the step loading makes of the same YAML.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::calls::{AgentTask, names};
use super::flow::{Flow, FlowError};
use crate::pipeline::approval_policy::ApprovalPolicy;
use crate::pipeline::flow_keys::{Decided, When};
use crate::pipeline::step_keys::{Approval as ApprovalKey, ApprovalSpec};
use crate::pipeline::{At, DurationSpec, Step, StepKind};
use crate::run::exec::input::ANSWER_FILE;

/// What an approval's deadline does (`on_timeout:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Escalation {
    /// Approve in place of a person.
    Approve,
    /// Reject (the default).
    Reject,
    /// Keep waiting, from then on for one answer of these names (`escalate_to:`).
    EscalateTo(Vec<String>),
}

impl Escalation {
    /// [`Escalation::EscalateTo`] these names.
    pub fn to<S: Into<String>>(names_: impl IntoIterator<Item = S>) -> Self {
        Self::EscalateTo(names_.into_iter().map(Into::into).collect())
    }
}

/// An approval step (`approval:` in its mapping form): its message and policy.
#[derive(Debug, Clone, Default)]
pub struct Approval {
    message: Option<String>,
    assignees: Vec<String>,
    approvers: Option<u32>,
    deadline: Option<Duration>,
    on_deadline: Option<Escalation>,
    escalation_deadline: Option<Duration>,
}

impl Approval {
    /// Anyone may approve, once; no deadline.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the person reads (`message:`).
    pub fn message(mut self, text: impl Into<String>) -> Self {
        self.message = Some(text.into());
        self
    }

    /// Only these user names may answer (`assignees:`).
    pub fn assignees<S: Into<String>>(mut self, names_: impl IntoIterator<Item = S>) -> Self {
        self.assignees = names_.into_iter().map(Into::into).collect();
        self
    }

    /// This many distinct people must approve (`approvers:`); one rejection rejects.
    pub fn approvers(mut self, n: u32) -> Self {
        self.approvers = Some(n);
        self
    }

    /// How long it waits (`timeout:`).
    pub fn deadline(mut self, wait: Duration) -> Self {
        self.deadline = Some(wait);
        self
    }

    /// What the deadline does (`on_timeout:` and `escalate_to:`).
    pub fn on_deadline(mut self, then: Escalation) -> Self {
        self.on_deadline = Some(then);
        self
    }

    /// With [`Escalation::EscalateTo`], how long the escalation waits before it rejects
    /// (`escalate_timeout:`).
    pub fn escalation_deadline(mut self, wait: Duration) -> Self {
        self.escalation_deadline = Some(wait);
        self
    }

    /// The typed step named `name`, as loading makes it of the mapping form.
    pub fn into_step(self, name: &str) -> Step {
        let (on_timeout, escalate_to) = match self.on_deadline {
            None => (None, Vec::new()),
            Some(Escalation::Approve) => (Some("approve"), Vec::new()),
            Some(Escalation::Reject) => (Some("reject"), Vec::new()),
            Some(Escalation::EscalateTo(to)) => (Some("escalate"), to),
        };
        let spec = ApprovalSpec {
            name: Some(name.to_owned()),
            message: None,
            timeout: None,
            on_timeout: None,
            assignees: names(self.assignees),
            approvers: self.approvers.map(At::new),
            escalate_to: names(escalate_to),
            escalate_timeout: self.escalation_deadline.map(|d| At::new(DurationSpec(d))),
        };
        let key = ApprovalKey::Spec(spec);
        let policy = ApprovalPolicy::of(&key);
        let mut step = Step::of_kind(StepKind::Approval {
            name: At::new(key),
            message: self.message,
            on_timeout: on_timeout.map(|t| At::new(t.to_owned())),
            policy,
        });
        step.timeout = self.deadline.map(|d| At::new(DurationSpec(d)));
        step
    }
}

/// A question for a person (an `input:` step's `question:`, `timeout:` and `default:`).
#[derive(Debug, Clone)]
pub struct Ask {
    question: String,
    deadline: Option<Duration>,
    default: Option<serde_json::Value>,
}

impl Ask {
    /// Asks `question`; no deadline.
    pub fn new(question: impl Into<String>) -> Self {
        Self {
            question: question.into(),
            deadline: None,
            default: None,
        }
    }

    /// How long it waits (`timeout:`): then the default is the answer, or the step fails.
    /// A run nobody watches (no terminal, no server) needs one.
    pub fn deadline(mut self, wait: Duration) -> Self {
        self.deadline = Some(wait);
        self
    }

    /// The answer taken at the deadline (`default:`).
    pub fn default_answer(mut self, value: serde_json::Value) -> Self {
        self.default = Some(value);
        self
    }
}

impl From<&str> for Ask {
    fn from(question: &str) -> Self {
        Self::new(question)
    }
}

/// Why a branch step was recorded as it was.
const TAKEN: &str = "branch taken";
const NOT_TAKEN: &str = "branch not taken";
const DEPENDS: &str = " (decided by step outputs)";

impl Flow {
    /// Asks for approval as step `name` and waits for it: `Ok(())` once approved (by the
    /// policy's people or the deadline), [`FlowError::Step`] when rejected or timed out.
    pub async fn approval(&mut self, name: &str, approval: Approval) -> Result<(), FlowError> {
        let step = approval.into_step(&self.named(name));
        if let StepKind::Approval {
            on_timeout, policy, ..
        } = &step.kind
            && let Some((_, _, message, hint)) = policy
                .problems(
                    on_timeout.as_ref(),
                    step.timeout.is_some(),
                    Default::default(),
                )
                .into_iter()
                .next()
        {
            // As loading refuses the same YAML.
            let reason = format!("{message} ({hint})");
            let name = step.display_name();
            return Err(FlowError::Refused { name, reason });
        }
        self.step(step).await.map(|_| ())
    }

    /// Asks a person `ask` as step `name` (an `input:` step whose `schema:` is `T`'s) and
    /// gives back the answer as a `T`.
    pub async fn human_input<T>(&mut self, name: &str, ask: impl Into<Ask>) -> Result<T, FlowError>
    where
        T: DeserializeOwned + schemars::JsonSchema,
    {
        let (full, ask) = (self.named(name), ask.into());
        let mut step = Step::of_kind(StepKind::Input(crate::pipeline::InputStep {
            name: At::new(full.clone()),
            question: Some(At::new(ask.question)),
            schema: Some(schemars::schema_for!(T).to_value()),
            choices: None,
            default: ask.default,
        }));
        step.timeout = ask.deadline.map(|d| At::new(DurationSpec(d)));
        step.outputs = vec![At::new(full.clone())];
        self.step(step).await?;
        self.typed_file(&full, ANSWER_FILE).await
    }

    /// Runs agent step `name`, whose answer is a `T`, as a decision: `task` needs
    /// `verdicts` and a `min_confidence`; a verdict below it asks a person (or the
    /// stronger agent of `escalate_to`) before the typed answer comes back.
    pub async fn decision<T>(&mut self, name: &str, task: AgentTask) -> Result<T, FlowError>
    where
        T: DeserializeOwned + schemars::JsonSchema,
    {
        if !task.decides() {
            return Err(FlowError::Refused {
                name: self.named(name),
                reason: "a decision needs `verdicts` and a `min_confidence`".to_owned(),
            });
        }
        self.agent(name, task.output::<T>()).await
    }

    /// Records branch `label` and whether it is taken (`cond`), decided by the workflow's
    /// input or by constants: a step named `label` in the run, succeeded when taken,
    /// skipped when not. Gives back `cond`.
    pub async fn when(&mut self, label: &str, cond: bool) -> Result<bool, FlowError> {
        self.branch(label, cond, "", None).await
    }

    /// [`Flow::when`] for a branch decided by the outputs of earlier steps (a planner
    /// that does not run them cannot tell which way it goes).
    pub async fn when_dynamic(&mut self, label: &str, cond: bool) -> Result<bool, FlowError> {
        // A plan that did not know an earlier step's output cannot tell (`super::plan`).
        if !self.all_known() {
            return Err(self.unevaluable(label, "the outcome"));
        }
        self.branch(label, cond, DEPENDS, None).await
    }

    /// Records branch `label` as not taken, for `reason`: the skipped step's record
    /// keeps it as its `note` (so do the API's step and `treadle runs --steps`), and the
    /// transcript says it (`- legacy skipped: retired in 2.0`).
    pub async fn skip(&mut self, label: &str, reason: impl Into<String>) -> Result<(), FlowError> {
        let reason = Some(reason.into());
        self.branch(label, false, "", reason).await.map(|_| ())
    }

    /// A `do: []` step named `label` whose guard is decided already (`cond`): the
    /// executor records it succeeded or skipped (with `reason`), as it does a YAML step's
    /// guard, and runs no command to decide it.
    async fn branch(
        &mut self,
        label: &str,
        cond: bool,
        why: &str,
        reason: Option<String>,
    ) -> Result<bool, FlowError> {
        let mut step = Step::of_kind(StepKind::Do(Vec::new()));
        step.name = Some(At::new(self.named(label)));
        let taken = if cond { TAKEN } else { NOT_TAKEN };
        step.description = Some(format!("{taken}{why}"));
        let decided = Decided {
            taken: cond,
            reason,
        };
        step.when = Some(At::new(When::Decided(decided)));
        self.step(step).await?;
        Ok(cond)
    }
}
