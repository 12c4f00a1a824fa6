//! The flow a workflow runs on: its calls, each one typed step through the executor, the
//! run it is in, and what a workflow is ([`Workflow`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::agents::Agents;
use super::artifact::ArtifactError;
use super::replies::ShellOutput;
use super::resume::Resume;
use crate::cache::Start;
use crate::pipeline::{At, Loaded, Step};
use crate::run::exec::Done;
use crate::run::open_run::OpenRun;
use crate::run::state::StepRecord;
use crate::run::{AgentRunner, RunError, Status, Style};

/// A workflow: a named async function of a [`Flow`] from a typed input to a typed output.
pub trait Workflow: Sync {
    /// What it is given.
    type Input: Send;
    /// What it gives back.
    type Output: Send;
    /// Its name: the run's job (and pipeline) in `treadle runs`; a child's steps are
    /// named `NAME.step`.
    const NAME: &'static str;

    /// Its body: the steps it calls on `flow`, in an order decided by `input` and their
    /// results only (a resume calls them again in that order).
    fn run(
        &self,
        flow: &mut Flow,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output, FlowError>> + Send;
}

/// Why a workflow did not give its output.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A step did not succeed.
    #[error("step `{name}` {}{}", .status.name(), .error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Step {
        /// The step.
        name: String,
        /// How it ended.
        status: Status,
        /// The kind of its failure (what a caller branches on, as on a YAML step's).
        failure: Option<crate::run::FailureKind>,
        /// Why.
        error: Option<String>,
        /// A shell step's output (its exit code, stdout and stderr), kept for the
        /// workflow to read or show ([`FlowError::output`]).
        output: Option<Box<ShellOutput>>,
    },
    /// A typed answer is missing or is not the type asked for.
    #[error("step `{name}` gave no typed answer: {reason}")]
    Output {
        /// The step.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A step was refused before it ran (as loading refuses it in a YAML file).
    #[error("step `{name}`: {reason}")]
    Refused {
        /// The step.
        name: String,
        /// Why.
        reason: String,
    },
    /// The workflow's own code gave up.
    #[error("{0}")]
    Failed(String),
    /// An output artifact of a step could not be had (a name the step did not declare)
    /// or read ([`ArtifactError`]).
    #[error(transparent)]
    Artifact(ArtifactError),
    /// The run could not start or its end could not be recorded.
    #[error(transparent)]
    Run(#[from] RunError),
    /// In a plan ([`super::plan()`]): what follows depends on an output of step `step`
    /// that is known only once it runs (its verdict, its typed answer), so the plan stops.
    #[error("what follows depends on {what} of `{step}`, known only once it runs")]
    Unevaluable {
        /// The step.
        step: String,
        /// Which of its outputs.
        what: String,
    },
}

impl FlowError {
    /// The status the run ends with.
    fn status(&self) -> Status {
        match self {
            Self::Step { status, .. } => *status,
            Self::Output { .. } | Self::Failed(_) => Status::Failed,
            Self::Artifact(ArtifactError::Read { .. }) => Status::Failed,
            Self::Refused { .. } | Self::Unevaluable { .. } | Self::Run(_) => Status::Errored,
            Self::Artifact(_) => Status::Errored,
        }
    }

    /// The output of the shell step that did not succeed (its exit code, stdout and
    /// stderr), when this is one.
    pub fn output(&self) -> Option<&ShellOutput> {
        match self {
            Self::Step { output, .. } => output.as_deref(),
            _ => None,
        }
    }

    /// The kind of failure the run ends with: a step's own, else what the error is.
    pub fn kind(&self) -> crate::run::FailureKind {
        use crate::run::FailureKind;
        match self {
            Self::Step { failure, .. } => failure.unwrap_or(FailureKind::Other),
            Self::Output { .. } => FailureKind::InvalidOutput,
            Self::Refused { .. } => FailureKind::Configuration,
            Self::Run(_) => FailureKind::Infrastructure,
            Self::Artifact(ArtifactError::Read { .. }) => FailureKind::Infrastructure,
            Self::Artifact(_) => FailureKind::Configuration,
            Self::Failed(_) | Self::Unevaluable { .. } => FailureKind::Other,
        }
    }
}

impl From<ArtifactError> for FlowError {
    /// In a plan an artifact's files are not there yet: that is where the plan stops
    /// ([`FlowError::Unevaluable`]), as at a verdict; the rest is [`FlowError::Artifact`].
    fn from(error: ArtifactError) -> Self {
        match error {
            ArtifactError::Unevaluable { step, name } => Self::Unevaluable {
                step,
                what: format!("its artifact `{name}`"),
            },
            other => Self::Artifact(other),
        }
    }
}

/// How a workflow runs: where it is recorded, its agents, and whether it resumes a run.
pub struct Options {
    /// The state file (`.treadle/state.redb` is what `treadle` uses beside a pipeline).
    pub state: PathBuf,
    /// The agents its agent steps name.
    pub agents: Agents,
    /// The run it resumes, if any ([`Resume`]): the resumed run's recorded steps with
    /// unchanged keys give back their results without running.
    pub resume: Resume,
    /// How the transcript is printed.
    pub style: Style,
    /// Cancelled to stop the run (Ctrl-C): the step running is aborted.
    pub cancel: CancellationToken,
    /// Runs agent steps (`None`: real sessions, as `treadle run`).
    pub runner: Option<Arc<dyn AgentRunner>>,
    /// The run's `timeout:` (a YAML job's): counted from the run's begin, no step starts
    /// once it has passed (`None`: no limit).
    pub timeout: Option<std::time::Duration>,
}

impl Options {
    /// A fresh run recorded in `state`, no agents, plain transcript.
    pub fn new(state: impl Into<PathBuf>) -> Self {
        Self {
            state: state.into(),
            agents: Agents::none(),
            resume: Resume::Fresh,
            style: Style::Plain,
            cancel: CancellationToken::new(),
            runner: None,
            timeout: None,
        }
    }

    /// With a `timeout:` for the whole run, as a YAML job's: once it has passed, the next
    /// step fails with `job timeout: ... passed before the next step could start`.
    pub fn timeout(mut self, limit: std::time::Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// With these agents.
    pub fn agents(mut self, agents: Agents) -> Self {
        self.agents = agents;
        self
    }

    /// Resuming run `run` (`None`: fresh).
    pub fn resume(mut self, run: Option<u64>) -> Self {
        self.resume = Resume::from(run);
        self
    }

    /// Resuming the newest run of this workflow in the state file if it is unfinished
    /// (its process was killed, or it was interrupted), else fresh: a program killed
    /// mid-run and started again goes on where it was, without being told the run's
    /// number. [`Report::resumed`] says which run it resumed.
    pub fn resume_last(mut self) -> Self {
        self.resume = Resume::Last;
        self
    }

    /// With this transcript style.
    pub fn style(mut self, style: Style) -> Self {
        self.style = style;
        self
    }
}

/// How a workflow's run ended.
#[derive(Debug)]
pub struct Report<O> {
    /// The run's id in the state file.
    pub run: u64,
    /// The run it resumed (`None`: a fresh run).
    pub resumed: Option<u64>,
    /// How it ended (its exit code: [`crate::run::RunReport::exit_code`]'s).
    pub status: Status,
    /// Its output, or why there is none.
    pub output: Result<O, FlowError>,
}

impl<O> Report<O> {
    /// The process exit code `treadle run` would give: 0, 1 (a step failed), 2 (could not
    /// run), 130 (interrupted).
    pub fn exit_code(&self) -> u8 {
        self.status.exit_code()
    }
}

/// The context of a workflow's run: each call is one step of it.
pub struct Flow {
    loaded: Loaded,
    mode: Mode,
    /// The child workflows being run, outermost first (their names prefix step names).
    within: Vec<&'static str>,
    /// The outline seq of the last step run (`None` before the first, and in a plan).
    last: Option<u32>,
}

/// What a flow's steps go to: the executor, in a run, or the planner
/// ([`super::plan()`]), which runs nothing.
pub(super) enum Mode {
    Run(Box<OpenRun>),
    Plan(Box<super::planner::Planner>),
}

/// Runs `workflow` on `input` as one run of the state file in `options`.
pub async fn run<W: Workflow>(
    workflow: &W,
    input: W::Input,
    options: Options,
) -> Result<Report<W::Output>, FlowError> {
    let store = crate::run::open_store(options.state.clone())
        .await
        .map_err(RunError::from)?;
    let kept = store.clone();
    let report = run_in(workflow, input, options, store, None).await;
    close(kept).await;
    report
}

/// The loaded "pipeline" of a workflow: its agents' file with one job named after it,
/// whose plan grows as the workflow calls steps.
pub(super) fn loaded_of<W: Workflow>(agents: super::Agents) -> Loaded {
    let mut pipeline = agents.pipeline;
    pipeline.jobs = vec![super::agents::empty_job(W::NAME)];
    Loaded {
        file: PathBuf::from(W::NAME),
        dir: crate::pipeline::dir_of(&agents.file),
        pipeline,
        // A workflow calls no `get:` or `put:`: its file's resources are not run.
        resources: crate::pipeline::Resources::default(),
    }
}

/// [`run`] in an open state file (`options.state` is not read); `served`: the run is
/// `treadle serve`'s, told its id and journal, its approvals and questions answered over
/// the API.
pub(crate) async fn run_in<W: Workflow>(
    workflow: &W,
    input: W::Input,
    options: Options,
    store: Arc<crate::run::Store>,
    served: Option<crate::server::workflows::OnBegin>,
) -> Result<Report<W::Output>, FlowError> {
    let Options {
        agents,
        resume,
        style,
        cancel,
        runner,
        timeout,
        ..
    } = options;
    let mut loaded = loaded_of::<W>(agents);
    if let Some(job) = loaded.pipeline.jobs.first_mut() {
        job.timeout = timeout.map(|t| At::new(crate::pipeline::DurationSpec(t)));
    }
    let runner = runner.unwrap_or_else(crate::run::agents::default_agent_runner);
    let start = resume.start(&store, W::NAME).await?;
    let resumed = match start {
        Start::Resume(run) => Some(run),
        _ => None,
    };
    let job = loaded.pipeline.jobs.first().ok_or(FlowError::Failed(
        "the workflow's job is missing".to_owned(),
    ))?;
    let mut open = OpenRun::begin(&loaded, job, store, runner, &start, style, cancel).await?;
    if let Some(on_begin) = served {
        open.answered_by_server();
        on_begin(open.id(), open.journal());
    }
    let mut flow = Flow {
        loaded,
        mode: Mode::Run(Box::new(open)),
        within: Vec::new(),
        last: None,
    };
    let output = workflow.run(&mut flow, input).await;
    let done = match &output {
        Ok(_) => Done::ok(),
        Err(e) => Done {
            status: e.status(),
            failure: Some(crate::run::StepFailure::new(e.kind(), e.to_string())),
            ..Done::ok()
        },
    };
    let Mode::Run(open) = flow.mode else {
        return Err(FlowError::Failed("a run's flow became a plan".to_owned()));
    };
    let ended = open.end(done).await?;
    Ok(Report {
        run: ended.run,
        resumed,
        status: ended.status,
        output,
    })
}

/// Closes the state file before [`run`] returns, so that a workflow run again at once in
/// this process (a resume) finds it free: agent sessions let go of it a moment after
/// their steps end, and the last handle is dropped here, where its closing (redb's, then
/// the lock's) is waited for, not on whichever thread let go last. A session that does
/// not stop within [`RELEASE_WAIT`] is left to close it.
async fn close(store: Arc<crate::run::Store>) {
    let start = std::time::Instant::now();
    while Arc::strong_count(&store) > 1 && start.elapsed() < RELEASE_WAIT {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let _ = tokio::task::spawn_blocking(move || drop(store)).await;
}

/// How long [`run`] waits for its agent sessions to let go of the state file.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Flow {
    /// A flow whose steps go to `planner` (see `super::plan`).
    pub(super) fn planning(loaded: Loaded, planner: Box<super::planner::Planner>) -> Self {
        Self {
            loaded,
            mode: Mode::Plan(planner),
            within: Vec::new(),
            last: None,
        }
    }

    /// Where its steps went.
    pub(super) fn into_mode(self) -> Mode {
        self.mode
    }

    /// The run's id in the state file (0 in a plan, which has no run).
    pub fn run_id(&self) -> u64 {
        match &self.mode {
            Mode::Run(open) => open.id(),
            Mode::Plan(_) => 0,
        }
    }

    /// Where artifact `name` is now (made by the last step that output it; `None` in a
    /// plan).
    pub fn artifact(&self, name: &str) -> Option<PathBuf> {
        match &self.mode {
            Mode::Run(open) => open.artifact(name),
            Mode::Plan(_) => None,
        }
    }

    /// The record of the last step run, as it stands (`None` in a plan).
    pub(super) fn last_record(&self) -> Option<StepRecord> {
        match (&self.mode, self.last) {
            (Mode::Run(open), Some(seq)) => open.record(seq),
            _ => None,
        }
    }

    /// Whether this flow is a plan ([`super::plan()`]): its steps do not run, a step the
    /// cache would replay gives back its recorded result, and one that would run gives
    /// back an empty one (exit code 0, no text), save a verdict or a typed answer, which
    /// is [`FlowError::Unevaluable`]. A workflow that branches on a step's text can ask
    /// this and say so with [`Flow::unevaluable`].
    pub fn is_planning(&self) -> bool {
        matches!(self.mode, Mode::Plan(_))
    }

    /// In a plan, whether the last step's result is known (it would be replayed); always
    /// true in a run.
    pub fn known(&self) -> bool {
        match &self.mode {
            Mode::Run(_) => true,
            Mode::Plan(p) => p.known(),
        }
    }

    /// In a plan, whether every step's result so far is known (each would be replayed);
    /// always true in a run.
    pub fn all_known(&self) -> bool {
        match &self.mode {
            Mode::Run(_) => true,
            Mode::Plan(p) => p.all_known(),
        }
    }

    /// The error a workflow gives in a plan where what it does next hangs on `what` of
    /// step `step`, not known before it runs; the plan records it as unevaluable.
    pub fn unevaluable(&self, step: &str, what: &str) -> FlowError {
        FlowError::Unevaluable {
            step: self.named(step),
            what: what.to_owned(),
        }
    }

    /// The workflow's loaded "pipeline": its agents (what an agent task is resolved
    /// against) and its job.
    pub(super) fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    /// The name a step of this flow gets: a child's steps carry its name.
    pub(super) fn named(&self, name: &str) -> String {
        let mut full: String = self.within.iter().map(|w| format!("{w}.")).collect();
        full.push_str(name);
        full
    }

    /// Runs one typed step (any kind a YAML plan takes) as the next step of the run, and
    /// gives back its record; a step that did not succeed is [`FlowError::Step`].
    pub async fn step(&mut self, step: Step) -> Result<StepRecord, FlowError> {
        let name = step.display_name();
        // As the checks refuse it in a file: an empty message would commit nothing.
        let commit = match &step.kind {
            crate::pipeline::StepKind::Agent(call) => call.commit.as_deref(),
            _ => None,
        };
        if commit.is_some_and(|m| m.trim().is_empty()) {
            return Err(FlowError::Refused {
                name,
                reason: "its commit message is empty".to_owned(),
            });
        }
        let job = match self.loaded.pipeline.jobs.first_mut() {
            Some(job) => job,
            None => return Err(FlowError::Failed("the workflow's job is missing".into())),
        };
        job.plan.push(At::new(step));
        let job = &self.loaded.pipeline.jobs[0];
        let open = match &mut self.mode {
            Mode::Run(open) => open,
            Mode::Plan(planner) => return Ok(planner.step(&self.loaded, job)),
        };
        let (done, seq) = open.step(&self.loaded, job).await;
        self.last = Some(seq);
        if !done.is_ok() {
            return Err(FlowError::Step {
                name,
                status: done.status,
                failure: done.kind(),
                error: done.error().map(str::to_owned),
                output: None,
            });
        }
        open.record(seq)
            .ok_or_else(|| FlowError::Failed(format!("step `{name}` has no record")))
    }

    /// The `T` in `file` of artifact `name` (made by step `name`).
    pub(super) async fn typed_file<T: DeserializeOwned>(
        &self,
        name: &str,
        file: &str,
    ) -> Result<T, FlowError> {
        let text = self
            .read_output(name, name, file, "the typed answer")
            .await?;
        serde_json::from_str(&text).map_err(|e| FlowError::Output {
            name: name.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The text of `file` in artifact `name`, made by `step`, which has just run. In a
    /// plan: its recorded one when the cache would replay the step, else
    /// [`FlowError::Unevaluable`] (`what`: which output of the step it is).
    pub(super) async fn read_output(
        &self,
        step: &str,
        name: &str,
        file: &str,
        what: &str,
    ) -> Result<String, FlowError> {
        let bad = |reason: String| FlowError::Output {
            name: name.to_owned(),
            reason,
        };
        if let Mode::Plan(planner) = &self.mode {
            return match planner.typed_answer(name, file) {
                Some(found) => found.map_err(|e| bad(e.to_string())),
                None => Err(FlowError::Unevaluable {
                    step: step.to_owned(),
                    what: what.to_owned(),
                }),
            };
        }
        let path = self
            .artifact(name)
            .ok_or_else(|| bad("its output artifact is missing".to_owned()))?
            .join(file);
        tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| bad(format!("{}: {e}", path.display())))
    }

    /// Runs `child` on `input` as steps of this run (named `CHILD.step`), and gives back
    /// its output.
    pub async fn workflow<W: Workflow>(
        &mut self,
        child: &W,
        input: W::Input,
    ) -> Result<W::Output, FlowError> {
        self.within.push(W::NAME);
        let out = child.run(self, input).await;
        self.within.pop();
        out
    }
}
