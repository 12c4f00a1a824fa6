//! The typed step: what loading makes of a written [`RawStep`]. Its kind is one variant
//! of [`StepKind`] holding that kind's own configuration (nested steps typed too), so
//! nothing after loading asks which kind a step is and handles an impossible answer.
//! [`Kind`] names the kinds. `super::typing::Typer` is the one conversion; a step with no
//! kind, several, or a key of another kind is a located load error there.

use super::agent_call::{AgentCall, TaskKeys};
use super::at::At;
use super::container::Container;
use super::duration::DurationSpec;
use super::ensemble::Ensemble;
use super::flow_keys::{Across, Axis, Race, To, When};
use super::in_parallel::InParallel;
use super::leaf_step::{GetStep, InputStep, PutStep};
use super::step_keys::{RunSpec, StepAssert};

/// One loaded step: its kind with the kind's configuration (an agent step's keys in its
/// [`AgentCall`], a task's `fix:` and mappings in its [`TaskKeys`]), and the keys every
/// step takes.
#[derive(Debug, Clone)]
pub struct Step {
    /// The kind and what only that kind has.
    pub kind: StepKind,
    /// What the step is for (for the reader).
    pub description: Option<String>,
    /// A guard command: the step runs only when it exits 0, else it is skipped.
    pub when: Option<At<When>>,
    /// Where the plan goes next after a success or a failure.
    pub to: Option<At<To>>,
    /// Runs the step once per combination of these variables' values (`across:`, with
    /// `max_in_flight:` and `fail_fast:`).
    pub across: Option<Across>,
    /// Step name, when the kind key does not give one (e.g. two steps of the same agent).
    pub name: Option<At<String>>,
    /// Decisions of other steps handed to this one.
    pub context: Option<At<super::step_keys::StepContext>>,
    /// Artifacts this step sees, each as a read-only directory of that name; on a put,
    /// `all`: every artifact produced so far.
    pub inputs: Vec<At<String>>,
    /// Artifacts this step makes: an empty directory each, collected after it succeeds.
    pub outputs: Vec<At<String>>,
    /// Extra environment variables: `{ NAME: value }`; a list of names is read as
    /// `pass_env:` (the spelling of `steps`).
    pub env: super::container::Env,
    /// Variables of treadle's own environment the step's commands inherit besides the
    /// allow-list (API-key variables are never there to pass).
    pub pass_env: Vec<String>,
    /// Directories kept across runs of the step, or writable under `$HOME`.
    pub caches: Vec<At<super::caches::Cache>>,
    /// `false`: the step's commands are not confined to the step directory (a deploy, a
    /// build that reads the project). Default `true`.
    pub confined: Option<bool>,
    /// Kill the step after this long (per attempt).
    pub timeout: Option<At<DurationSpec>>,
    /// Run the step up to this many times until it succeeds (default 1).
    pub attempts: Option<At<u32>>,
    /// How many times a verdict may route the plan back to this step in one run.
    pub max_visits: Option<At<u32>>,
    /// Deterministic checks of what the step did.
    pub assert: Option<At<StepAssert>>,
    /// `image:` and the keys beside it (`privileged:`, `user:`, `container_limits:`).
    pub container: Option<Container>,
    /// What the step's commands may connect to (`crate::pipeline::network`); unset: the
    /// agent's, then `defaults:`'s, then `none` for a confined step.
    pub network: Option<At<super::network::Network>>,
    /// Never replay this step from the cache (it reads something its key cannot see).
    pub volatile: bool,
    /// `keep_on_failure: true` (a task or agent step): when it fails, its outputs are kept
    /// for inspection and as the starting state of a `--rerun` of it (`crate::run::exec::kept`).
    pub keep_on_failure: Option<At<bool>>,
    /// The steps run after it, by how it ended (`on_success:` ... `ensure:`).
    pub outcomes: Outcomes,
}

/// The outcome steps of a step: each runs after it ended a certain way.
#[derive(Debug, Clone, Default)]
pub struct Outcomes {
    /// Runs after the step succeeded; its failure fails the step.
    pub on_success: Option<Box<At<Step>>>,
    /// Runs after the step failed; the step stays failed.
    pub on_failure: Option<Box<At<Step>>>,
    /// Runs after the step errored (it could not be run); the step stays errored.
    pub on_error: Option<Box<At<Step>>>,
    /// Runs after the run was interrupted during the step.
    pub on_abort: Option<Box<At<Step>>>,
    /// Runs after the step whatever happened; its failure fails the step.
    pub ensure: Option<Box<At<Step>>>,
}

impl Outcomes {
    /// The outcome steps present, with their keys, in the order they may run.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &At<Step>)> {
        [
            ("on_success", &self.on_success),
            ("on_failure", &self.on_failure),
            ("on_error", &self.on_error),
            ("on_abort", &self.on_abort),
            ("ensure", &self.ensure),
        ]
        .into_iter()
        .filter_map(|(k, h)| h.as_deref().map(|h| (k, h)))
    }

    /// Each slot, present or not, to change in place.
    pub fn slots_mut(&mut self) -> [&mut Option<Box<At<Step>>>; 5] {
        [
            &mut self.on_success,
            &mut self.on_failure,
            &mut self.on_error,
            &mut self.on_abort,
            &mut self.ensure,
        ]
    }
}

impl super::flow_keys::AcrossStep for Step {
    fn across_axes(&self) -> Option<&At<Vec<Axis>>> {
        self.across.as_ref().map(|a| &a.axes)
    }
    fn shown_name(&self) -> String {
        self.display_name()
    }
}

impl Step {
    /// An agent step of `call` with no other key set (an ensemble's judge, a task's fixer,
    /// a step built in code).
    pub fn agent(call: AgentCall) -> Self {
        Self::of_kind(StepKind::Agent(Box::new(call)))
    }

    /// A step of `kind` with no other key set.
    pub fn of_kind(kind: StepKind) -> Self {
        Self {
            kind,
            description: None,
            when: None,
            to: None,
            across: None,
            name: None,
            context: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            env: super::container::Env::default(),
            pass_env: Vec::new(),
            caches: Vec::new(),
            confined: None,
            timeout: None,
            attempts: None,
            max_visits: None,
            assert: None,
            container: None,
            network: None,
            volatile: false,
            keep_on_failure: None,
            outcomes: Outcomes::default(),
        }
    }
}

/// The kind of a loaded step, holding the kind's own configuration.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// `task:` with its command.
    Task {
        /// The value of `task:`.
        name: At<String>,
        /// The command.
        run: At<RunSpec>,
        /// `fix:` and the mappings.
        keys: TaskKeys,
    },
    /// `agent:` naming an agent, with the keys of an agent step.
    Agent(Box<AgentCall>),
    /// `approval:`.
    Approval {
        /// The value of `approval:` (its long form is resolved into the keys below).
        name: At<super::step_keys::Approval>,
        /// Text shown to the person asked.
        message: Option<String>,
        /// What the step's `timeout` does: `approve`, `reject` or `escalate`.
        on_timeout: Option<At<String>>,
        /// Who answers, how many must approve, who the deadline escalates to.
        policy: super::approval_policy::ApprovalPolicy,
    },
    /// `input:`: a question a person answers.
    Input(InputStep),
    /// `get:` of a resource.
    Get(GetStep),
    /// `put:` to a resource.
    Put(PutStep),
    /// `do:`.
    Do(Vec<At<Step>>),
    /// `in_parallel:`.
    InParallel(InParallel<Step>),
    /// `try:`.
    Try(Box<At<Step>>),
    /// `race:`.
    Race(Race<Step>),
    /// `ensemble:`.
    Ensemble(At<Ensemble<Step>>),
    /// `load_var:` naming the var.
    LoadVar {
        /// The var.
        name: At<String>,
        /// `ARTIFACT/path` of the file read.
        file: Option<At<String>>,
    },
    /// `http:` naming the step, with its request.
    Http {
        /// The value of `http:`.
        name: At<String>,
        /// The request.
        call: Box<super::http_step::HttpCall>,
    },
}

impl StepKind {
    /// The kind's key, as written in the file.
    pub fn key(&self) -> &'static str {
        self.kind().key()
    }

    /// The kind without its configuration.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Task { .. } => Kind::Task,
            Self::Agent(_) => Kind::Agent,
            Self::Approval { .. } => Kind::Approval,
            Self::Input(_) => Kind::Input,
            Self::Get(_) => Kind::Get,
            Self::Put(_) => Kind::Put,
            Self::Do(_) => Kind::Do,
            Self::InParallel(_) => Kind::InParallel,
            Self::Try(_) => Kind::Try,
            Self::Race(_) => Kind::Race,
            Self::Ensemble(_) => Kind::Ensemble,
            Self::LoadVar { .. } => Kind::LoadVar,
            Self::Http { .. } => Kind::Http,
        }
    }

    /// The value of the kind key that names the step (`None` for containers).
    pub(super) fn named(&self) -> Option<String> {
        match self {
            Self::Agent(call) => Some(call.agent.value.clone()),
            Self::Input(InputStep { name, .. })
            | Self::Get(GetStep { name, .. })
            | Self::Put(PutStep { name, .. })
            | Self::Task { name, .. }
            | Self::LoadVar { name, .. }
            | Self::Http { name, .. } => Some(name.value.clone()),
            Self::Approval { name, .. } => Some(name.value.name().to_owned()),
            Self::Do(_)
            | Self::InParallel(_)
            | Self::Try(_)
            | Self::Race(_)
            | Self::Ensemble(_) => None,
        }
    }
}

/// A step's kind without its configuration: what the outline, the transcript and the
/// records name. Serialized (and shown) as the key written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `task:`.
    Task,
    /// `agent:`.
    Agent,
    /// `approval:`.
    Approval,
    /// `input:`.
    Input,
    /// `get:`.
    Get,
    /// `put:`.
    Put,
    /// `do:`.
    Do,
    /// `in_parallel:`.
    InParallel,
    /// `try:`.
    Try,
    /// `race:`.
    Race,
    /// `ensemble:`.
    Ensemble,
    /// `load_var:`.
    LoadVar,
    /// `http:`.
    Http,
    /// A step with no single kind: never made by loading, kept so that records written
    /// with it still read.
    #[serde(rename = "step")]
    Invalid,
}

impl Kind {
    /// The kind of `step`.
    pub fn of(step: &Step) -> Self {
        step.kind.kind()
    }

    /// The key, as written in the file.
    pub fn key(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Agent => "agent",
            Self::Approval => "approval",
            Self::Input => "input",
            Self::Get => "get",
            Self::Put => "put",
            Self::Do => "do",
            Self::InParallel => "in_parallel",
            Self::Try => "try",
            Self::Race => "race",
            Self::Ensemble => "ensemble",
            Self::LoadVar => "load_var",
            Self::Http => "http",
            Self::Invalid => "step",
        }
    }

    /// Whether it is a leaf step, one that is not a container of others (what
    /// `assert: execution` lists).
    pub fn is_leaf(self) -> bool {
        matches!(
            self,
            Self::Task
                | Self::Agent
                | Self::Approval
                | Self::Input
                | Self::Get
                | Self::Put
                | Self::LoadVar
                | Self::Http
        )
    }

    /// Whether it is a leaf that does work of its own (a spinner shows while it runs).
    pub fn is_work(self) -> bool {
        matches!(
            self,
            Self::Task | Self::Agent | Self::Approval | Self::Input | Self::Http
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}
