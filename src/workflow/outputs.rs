//! What a workflow's shell and agent steps give back, and the calls that run them:
//! [`Flow::shell`] gives a [`ShellOutput`] (a failed command's is kept in its error),
//! [`Flow::agent`] an [`AgentReply`], or a `T` for a task whose answer is typed
//! ([`AgentTask::output`] makes a [`Typed`] task). Each result hands out its step's
//! declared output artifacts by name ([`super::Artifact`]).

use std::future::Future;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::artifact::{Artifact, Made, declared};
use super::calls::{AgentTask, Shell};
use super::flow::{Flow, FlowError};
use crate::pipeline::controls::OUTPUT_FILE;
use crate::run::state::StepRecord;

/// What a shell step gave back, as its record in the state file keeps it (a replayed
/// step gives back what it gave when it ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutput {
    /// Its exit code (`None`: a signal or its timeout ended it).
    pub exit_code: Option<i32>,
    /// Its stdout: the last 64 KiB ([`crate::run::task::STREAM_END_BYTES`]), secrets
    /// masked. A longer result belongs in an output artifact.
    pub stdout: String,
    /// Its stderr, the same way.
    pub stderr: String,
    /// Whether stdout or stderr was longer than that, so only its end is here.
    pub truncated: bool,
    made: Made,
}

impl ShellOutput {
    /// Whether the command exited 0. A step that did not is an
    /// `Err(FlowError::Step { .. })`, whose [`FlowError::output`] is this.
    pub fn is_success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// Output artifact `name` of the step (one of its `outputs`), or
    /// [`FlowError::ArtifactNotDeclared`].
    pub fn artifact(&self, name: &str) -> Result<Artifact, FlowError> {
        self.made.get(name)
    }

    /// Of the step's record. A record written before streams were kept apart has only the
    /// end of both, mixed: it is given as stdout, marked truncated.
    fn of(record: &StepRecord, made: Made) -> Self {
        let (stdout, stderr, truncated) = match &record.streams {
            Some(s) => (s.stdout.clone(), s.stderr.clone(), s.cut),
            None => (record.stdout_tail.clone(), String::new(), true),
        };
        Self {
            exit_code: record.exit_code,
            stdout,
            stderr,
            truncated,
            made,
        }
    }
}

/// What an agent step gave back (as its record keeps it).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    /// The end of its final answer (the last 4 KiB, secrets masked); a longer result
    /// belongs in an output artifact or a typed answer.
    pub text: String,
    /// The verdict it picked, with `verdicts`.
    pub verdict: Option<String>,
    /// The reason it gave with its verdict.
    pub note: Option<String>,
    made: Made,
}

impl AgentReply {
    /// Output artifact `name` of the step (one of its `outputs`), or
    /// [`FlowError::ArtifactNotDeclared`].
    pub fn artifact(&self, name: &str) -> Result<Artifact, FlowError> {
        self.made.get(name)
    }
}

/// An agent task whose answer is a `T` ([`AgentTask::output`]): [`Flow::agent`] gives
/// back the `T`.
#[derive(Debug, Clone)]
pub struct Typed<T> {
    task: AgentTask,
    // `fn() -> T`: the task holds no `T`, so it is `Send` whatever `T` is.
    answer: PhantomData<fn() -> T>,
}

impl<T> Typed<T> {
    pub(super) fn new(task: AgentTask) -> Self {
        Self {
            task,
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
        let step = self.into_step(&flow.named(name));
        let decides =
            matches!(&step.kind, crate::pipeline::StepKind::Agent(c) if c.verdicts.is_some());
        let full = flow.named(name);
        let declared = declared(&step);
        let record = flow.step(step).await?;
        if decides && !flow.known() {
            return Err(flow.unevaluable(name, "the verdict"));
        }
        Ok(AgentReply {
            text: record.stdout_tail,
            verdict: record.verdict,
            note: record.note,
            made: Made::of(flow, &full, &declared),
        })
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
        flow.step(call.into_step(&full)).await?;
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
            Ok(record) => Ok(ShellOutput::of(&record, Made::of(self, &full, &declared))),
            Err(FlowError::Step {
                name,
                status,
                error,
                output: None,
            }) => {
                let made = Made::of(self, &full, &declared);
                let output = self
                    .last_record()
                    .map(|r| Box::new(ShellOutput::of(r, made)));
                Err(FlowError::Step {
                    name,
                    status,
                    error,
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
