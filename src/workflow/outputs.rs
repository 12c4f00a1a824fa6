//! The calls that run a workflow's shell and agent steps: [`Flow::shell`] gives a
//! [`ShellOutput`] (a failed command's is kept in its error), [`Flow::agent`] an
//! [`AgentReply`], or a `T` for a task whose answer is typed ([`AgentTask::output`] makes
//! a [`Typed`] task). What they give back is `replies.rs`.

use std::future::Future;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::artifact::{Made, declared};
use super::calls::{AgentTask, Shell};
use super::flow::{Flow, FlowError};
use super::replies::{AgentReply, ShellOutput};
use crate::pipeline::controls::OUTPUT_FILE;

/// An agent task whose answer is a `T` ([`AgentTask::output`]): [`Flow::agent`] gives
/// back the `T`.
#[derive(Debug, Clone)]
pub struct Typed<T> {
    task: AgentTask,
    // `fn() -> T`: the task holds no `T`, so it is `Send` whatever `T` is.
    answer: PhantomData<fn() -> T>,
}

// Here rather than with the task's other builders (`calls.rs`): what a step gives back
// is this file's concern, and `calls` stays below it.
impl AgentTask {
    /// Its answer is a `T`: [`Flow::agent`] gives back the `T` instead of an
    /// [`AgentReply`]. `T`'s JSON Schema (schemars) is the step's `output_schema:`, and the
    /// answer is written to an output artifact named after the step.
    pub fn output<T>(self) -> Typed<T>
    where
        T: DeserializeOwned + schemars::JsonSchema,
    {
        Typed {
            task: self,
            answer: PhantomData,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::AgentTask {}
    impl<T> Sealed for super::Typed<T> {}
}

/// What [`Flow::agent`] takes: an [`AgentTask`], answered by an [`AgentReply`], or a
/// [`Typed`] one, answered by its `T`. Not implemented outside this crate.
pub trait AgentAsk: sealed::Sealed + Send {
    /// What the step gives back.
    type Answer;

    /// Runs the task as step `name` of `flow`.
    #[doc(hidden)]
    fn ask(
        self,
        flow: &mut Flow,
        name: &str,
    ) -> impl Future<Output = Result<Self::Answer, FlowError>> + Send;
}

impl AgentAsk for AgentTask {
    type Answer = AgentReply;

    async fn ask(self, flow: &mut Flow, name: &str) -> Result<AgentReply, FlowError> {
        let step = self.into_step(&flow.named(name), flow.loaded())?;
        let decides =
            matches!(&step.kind, crate::pipeline::StepKind::Agent(c) if c.verdicts.is_some());
        let full = flow.named(name);
        let declared = declared(&step);
        let record = flow.step(step).await?;
        if decides && !flow.known() {
            return Err(flow.unevaluable(name, "the verdict"));
        }
        let made = Made::of(&full, &declared, |o| flow.artifact(o));
        Ok(AgentReply::of(record, made))
    }
}

impl<T> AgentAsk for Typed<T>
where
    T: DeserializeOwned + schemars::JsonSchema,
{
    type Answer = T;

    async fn ask(self, flow: &mut Flow, name: &str) -> Result<T, FlowError> {
        let full = flow.named(name);
        let schema = schemars::schema_for!(T).to_value();
        let call = self.task.output_schema(&full, schema);
        flow.step(call.into_step(&full, flow.loaded())?).await?;
        flow.typed_file(&full, OUTPUT_FILE).await
    }
}

impl Flow {
    /// Runs a shell command as step `name` (a `task:`). A command that does not exit 0 is
    /// `Err(FlowError::Step { .. })` holding its [`ShellOutput`] ([`FlowError::output`]).
    pub async fn shell(&mut self, name: &str, shell: Shell) -> Result<ShellOutput, FlowError> {
        let full = self.named(name);
        let step = shell.into_step(&full);
        let declared = declared(&step);
        match self.step(step).await {
            Ok(record) => {
                let made = Made::of(&full, &declared, |o| self.artifact(o));
                Ok(ShellOutput::of(&record, made))
            }
            Err(FlowError::Step {
                name,
                status,
                error,
                failure,
                output: None,
            }) => {
                let made = Made::of(&full, &declared, |o| self.artifact(o));
                let output = self
                    .last_record()
                    .map(|r| Box::new(ShellOutput::of(&r, made)));
                Err(FlowError::Step {
                    name,
                    status,
                    error,
                    failure,
                    output,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Runs agent task `task` as step `name`: an [`AgentTask`] gives back its answer and
    /// verdict ([`AgentReply`]); a typed one (`task.output::<T>()`) its answer as a `T`.
    pub async fn agent<A: AgentAsk>(
        &mut self,
        name: &str,
        task: A,
    ) -> Result<A::Answer, FlowError> {
        task.ask(self, name).await
    }

    /// Runs an agent step named `name` whose answer is a `T`.
    #[deprecated(note = "use `flow.agent(name, task.output::<T>())`")]
    pub async fn agent_typed<T>(&mut self, name: &str, task: AgentTask) -> Result<T, FlowError>
    where
        T: DeserializeOwned + schemars::JsonSchema,
    {
        self.agent(name, task.output::<T>()).await
    }
}
