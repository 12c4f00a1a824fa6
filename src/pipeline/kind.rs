//! What a step is: the typed [`StepKind`] a loaded step holds, its display name, and
//! the keys that belong to each kind (read off a written [`RawStep`] when it is typed).

use std::collections::BTreeMap;

use super::agent_call::{AgentCall, TaskKeys};
use super::at::{At, Pos};
use super::ensemble::Ensemble;
use super::flow::{FAILURE_VERDICT, Race};
use super::format::{InParallel, Job, RawStep};
use super::step::Step;
use super::step_keys::RunSpec;

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
        /// What the step's `timeout` answers: `approve` or `reject`.
        on_timeout: Option<At<String>>,
    },
    /// `input:`: a question a person answers.
    Input {
        /// The value of `input:`, the step's name.
        name: At<String>,
        /// What is asked.
        question: Option<At<String>>,
        /// The JSON Schema the answer must fit.
        schema: Option<serde_json::Value>,
        /// The only answers allowed.
        choices: Option<Vec<String>>,
        /// The answer taken when the step's `timeout` passes.
        default: Option<serde_json::Value>,
    },
    /// `get:` of a resource.
    Get {
        /// The value of `get:`, the artifact fetched into.
        name: At<String>,
        /// The resource: `resource:`, else the name.
        resource: At<String>,
        /// Resource-specific parameters.
        params: Option<BTreeMap<String, serde_json::Value>>,
        /// `latest`, `every`, or a pinned version.
        version: Option<At<super::resource_type::VersionSpec>>,
        /// Whether `treadle watch` builds the job on a new version.
        trigger: Option<At<bool>>,
        /// Only versions that passed these jobs together.
        passed: Option<At<Vec<At<String>>>>,
    },
    /// `put:` to a resource.
    Put {
        /// The value of `put:`.
        name: At<String>,
        /// The resource: `resource:`, else the name.
        resource: At<String>,
        /// Resource-specific parameters.
        params: Option<BTreeMap<String, serde_json::Value>>,
    },
    /// `do:`.
    Do(Vec<At<Step>>),
    /// `in_parallel:`.
    InParallel(InParallel),
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
            Self::Input { .. } => Kind::Input,
            Self::Get { .. } => Kind::Get,
            Self::Put { .. } => Kind::Put,
            Self::Do(_) => Kind::Do,
            Self::InParallel(_) => Kind::InParallel,
            Self::Try(_) => Kind::Try,
            Self::Race(_) => Kind::Race,
            Self::Ensemble(_) => Kind::Ensemble,
            Self::LoadVar { .. } => Kind::LoadVar,
        }
    }

    /// The value of the kind key that names the step (`None` for containers).
    fn named(&self) -> Option<String> {
        match self {
            Self::Agent(call) => Some(call.agent.value.clone()),
            Self::Task { name, .. }
            | Self::Input { name, .. }
            | Self::Get { name, .. }
            | Self::Put { name, .. }
            | Self::LoadVar { name, .. } => Some(name.value.clone()),
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
        )
    }

    /// Whether it is a leaf that does work of its own (a spinner shows while it runs).
    pub fn is_work(self) -> bool {
        matches!(
            self,
            Self::Task | Self::Agent | Self::Approval | Self::Input
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// Why a step has no single kind.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum KindError {
    /// None of the kind keys is present.
    #[error(
        "this step has no kind: it needs one of task, agent, approval, input, get, put, do, in_parallel, try, race, ensemble, load_var"
    )]
    None,
    /// More than one is.
    #[error("this step has several kinds ({0}); a step has exactly one")]
    Several(String),
    /// A `task:` without `run:`.
    #[error("task `{0}` has no `run:` command")]
    TaskWithoutRun(String),
}

impl RawStep {
    /// The names of the kind keys present.
    pub(super) fn kind_keys(&self) -> Vec<&'static str> {
        [
            ("task", self.task.is_some()),
            ("agent", self.agent.is_some()),
            ("approval", self.approval.is_some()),
            ("input", self.input.is_some()),
            ("get", self.get.is_some()),
            ("put", self.put.is_some()),
            ("do", self.do_.is_some()),
            ("in_parallel", self.in_parallel.is_some()),
            ("try", self.try_.is_some()),
            ("race", self.race.is_some()),
            ("ensemble", self.ensemble.is_some()),
            ("load_var", self.load_var.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, present)| present.then_some(k))
        .collect()
    }

    /// Kind-specific keys present on this step, with the kinds they belong to.
    pub fn specific_keys(&self) -> Vec<(&'static str, &'static [&'static str], Option<Pos>)> {
        const TASK: &[&str] = &["task"];
        const AGENT: &[&str] = &["agent"];
        const APPROVAL: &[&str] = &["approval"];
        const INPUT: &[&str] = &["input"];
        const RESOURCE: &[&str] = &["get", "put"];
        let mut keys = Vec::new();
        let mut add = |key, kinds, present: bool, pos: Option<Pos>| {
            if present {
                keys.push((key, kinds, pos));
            }
        };
        add(
            "run",
            TASK,
            self.run.is_some(),
            self.run.as_ref().map(|r| r.pos),
        );
        add("prompt", AGENT, self.prompt.is_some(), None);
        add("messages", AGENT, self.messages.is_some(), None);
        add(
            "tools",
            AGENT,
            self.tools.is_some(),
            self.tools.as_ref().and_then(|t| t.first()).map(|t| t.pos),
        );
        add(
            "verdicts",
            AGENT,
            self.verdicts.is_some(),
            self.verdicts
                .as_ref()
                .and_then(|t| t.first())
                .map(|t| t.pos),
        );
        add("budget", AGENT, self.budget.is_some(), None);
        add("commit", AGENT, self.commit.is_some(), None);
        add(
            "output_schema",
            AGENT,
            self.output_schema.is_some(),
            self.output_schema.as_ref().map(|t| t.pos),
        );
        add(
            "min_confidence",
            AGENT,
            self.min_confidence.is_some(),
            self.min_confidence.as_ref().map(|t| t.pos),
        );
        add(
            "escalate_to",
            AGENT,
            self.escalate_to.is_some(),
            self.escalate_to.as_ref().map(|t| t.pos),
        );
        add(
            "max_context_bytes",
            AGENT,
            self.max_context_bytes.is_some(),
            None,
        );
        add("message", APPROVAL, self.message.is_some(), None);
        add(
            "question",
            INPUT,
            self.question.is_some(),
            self.question.as_ref().map(|q| q.pos),
        );
        add("schema", INPUT, self.schema.is_some(), None);
        add("choices", INPUT, self.choices.is_some(), None);
        add("default", INPUT, self.default.is_some(), None);
        add(
            "on_timeout",
            APPROVAL,
            self.on_timeout.is_some(),
            self.on_timeout.as_ref().map(|t| t.pos),
        );
        add(
            "resource",
            RESOURCE,
            self.resource.is_some(),
            self.resource.as_ref().map(|t| t.pos),
        );
        add("params", RESOURCE, self.params.is_some(), None);
        add(
            "version",
            &["get"],
            self.version.is_some(),
            self.version.as_ref().map(|v| v.pos),
        );
        add(
            "trigger",
            &["get"],
            self.trigger.is_some(),
            self.trigger.as_ref().map(|t| t.pos),
        );
        add(
            "passed",
            &["get"],
            self.passed.is_some(),
            self.passed.as_ref().map(|t| t.pos),
        );
        add(
            "file",
            &["load_var"],
            self.file.is_some(),
            self.file.as_ref().map(|f| f.pos),
        );
        keys
    }
}

impl Step {
    /// The agent of an `agent:` step.
    pub fn agent_name(&self) -> Option<&At<String>> {
        self.agent_call().map(|c| &c.agent)
    }

    /// The keys of an `agent:` step.
    pub fn agent_call(&self) -> Option<&AgentCall> {
        match &self.kind {
            StepKind::Agent(call) => Some(call),
            _ => None,
        }
    }

    /// The `fix:` and mappings of a `task:` step.
    pub fn task_keys(&self) -> Option<&TaskKeys> {
        match &self.kind {
            StepKind::Task { keys, .. } => Some(keys),
            _ => None,
        }
    }

    /// The artifact a `get:` step fetches into: the value of `get:`.
    pub fn got(&self) -> Option<&At<String>> {
        match &self.kind {
            StepKind::Get { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The `params:` of a `get:` or `put:` step.
    pub fn params(&self) -> Option<&BTreeMap<String, serde_json::Value>> {
        match &self.kind {
            StepKind::Get { params, .. } | StepKind::Put { params, .. } => params.as_ref(),
            _ => None,
        }
    }

    /// The `version:` of a `get:` step.
    pub fn version(&self) -> Option<&At<super::resource_type::VersionSpec>> {
        match &self.kind {
            StepKind::Get { version, .. } => version.as_ref(),
            _ => None,
        }
    }

    /// The command of a `task:` step.
    pub fn run(&self) -> Option<&At<RunSpec>> {
        match &self.kind {
            StepKind::Task { run, .. } => Some(run),
            _ => None,
        }
    }

    /// The step's name: `name:` if given, else the value of its kind key, else the kind.
    pub fn display_name(&self) -> String {
        if let Some(n) = &self.name {
            return n.value.clone();
        }
        self.kind
            .named()
            .unwrap_or_else(|| self.kind.key().to_owned())
    }

    /// The question of an `input:` step (`None` without `question:`): its schema (default:
    /// any string), choices and default answer.
    pub fn input_question(&self) -> Option<treadle_session::HumanQuestion> {
        let StepKind::Input {
            question,
            schema,
            choices,
            default,
            ..
        } = &self.kind
        else {
            return None;
        };
        let text = &question.as_ref()?.value;
        let mut question = treadle_session::HumanQuestion::new(text.clone());
        let choices = choices.clone().unwrap_or_default();
        question.schema = match (schema, choices.is_empty()) {
            (Some(schema), _) => schema.clone(),
            (None, false) => serde_json::json!({ "enum": choices }),
            (None, true) => question.schema,
        };
        question.choices = choices;
        question.default = default.clone();
        Some(question)
    }

    /// The nested steps of a container (not its hooks), in the order they are written:
    /// an ensemble's members, then its judge.
    pub fn children(&self) -> Vec<&At<Step>> {
        match &self.kind {
            StepKind::Do(steps) => steps.iter().collect(),
            StepKind::InParallel(p) => p.steps().iter().collect(),
            StepKind::Race(r) => r.steps.iter().collect(),
            StepKind::Try(inner) => vec![inner],
            StepKind::Ensemble(e) => e.steps().collect(),
            _ => Vec::new(),
        }
    }

    /// The step's `verdicts:` entries: its own, or an ensemble's (which route the block).
    fn verdict_entries(&self) -> impl Iterator<Item = &super::flow::VerdictEntry> {
        match &self.kind {
            StepKind::Ensemble(e) => e.verdicts.as_slice(),
            StepKind::Agent(call) => call.verdicts.as_deref().unwrap_or_default(),
            _ => &[],
        }
        .iter()
    }

    /// The routes of this step's verdicts that name a target: `(verdict, target)` pairs,
    /// `next` and the reserved `failure` included; a bare verdict has none.
    pub fn routes(&self) -> Vec<(&str, &At<String>)> {
        self.verdict_entries()
            .flat_map(|entry| entry.value.pairs())
            .filter_map(|(name, target)| target.map(|t| (name, t)))
            .collect()
    }

    /// The verdicts the model may pick, in the order written (`failure` is not one: the
    /// runtime arrives at it).
    pub fn verdict_choices(&self) -> Vec<String> {
        self.verdict_entries()
            .flat_map(|entry| entry.value.pairs())
            .map(|(name, _)| name)
            .filter(|name| *name != FAILURE_VERDICT)
            .map(str::to_owned)
            .collect()
    }

    /// Where the plan goes when this step failed: `to: { failure }`, or the reserved
    /// `failure` verdict.
    pub fn failure_route(&self) -> Option<&At<String>> {
        self.to
            .as_ref()
            .and_then(|t| t.value.failure.as_ref())
            .or_else(|| {
                self.routes()
                    .into_iter()
                    .find(|(v, _)| *v == FAILURE_VERDICT)
                    .map(|(_, t)| t)
            })
    }

    /// Whether this is a `get` with `version: every` (from it on, the plan runs once per
    /// version not taken yet).
    pub fn is_every_get(&self) -> bool {
        matches!(&self.kind, StepKind::Get { version: Some(v), .. }
            if v.value == super::resource_type::VersionSpec::Every)
    }

    /// Every route target this step names, with the outcome or verdict that takes it.
    pub fn all_routes(&self) -> Vec<(&str, &At<String>)> {
        let mut all = self.routes();
        if let Some(to) = &self.to {
            all.extend(to.value.success.as_ref().map(|t| ("success", t)));
            all.extend(to.value.failure.as_ref().map(|t| ("failure", t)));
        }
        all
    }

    /// The artifacts this step sees under another name (`input_mapping:`,
    /// `output_mapping:`), as `(artifact, name in the step directory)`.
    pub fn mounts(&self) -> Vec<(String, String)> {
        let Some(keys) = self.task_keys() else {
            return Vec::new();
        };
        [&keys.input_mapping, &keys.output_mapping]
            .into_iter()
            .flatten()
            .flat_map(|m| m.value.iter())
            .map(|(inner, artifact)| (artifact.clone(), inner.clone()))
            .collect()
    }

    /// The hooks present, in the order they may run.
    pub fn hooks(&self) -> impl Iterator<Item = (&'static str, &At<Step>)> {
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
}

impl<S> Job<S> {
    /// The job's hooks present, in the order they may run.
    pub fn hooks(&self) -> impl Iterator<Item = (&'static str, &At<S>)> {
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
}
