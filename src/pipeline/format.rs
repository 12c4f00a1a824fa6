//! The pipeline file format: the types a `treadle.yml` deserializes into.
//!
//! The keys follow Concourse and `steps`: `resources`, `agents`, `jobs`, each job a `plan`
//! of steps. A step is one mapping that names its kind with one key (`task:`, `agent:`,
//! `approval:`, `get:`, `put:`, `do:`, `in_parallel:`, `try:`) next to the keys every step
//! takes (`inputs`, `outputs`, `env`, `timeout`, `attempts`, hooks). The mapping is read
//! into one flat [`RawStep`] (in [`super::raw_step`]) so that an unknown key is reported
//! where it is written; which keys belong to which kind is decided when loading types it
//! ([`super::typing`]).
//!
//! Every struct denies unknown fields: a typo is a load error, never silently ignored.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent_def::AgentRef;
pub use super::agent_def::{Agent, AgentSource, Budget, McpServerSpec};
use super::at::At;
use super::duration::DurationSpec;
pub use super::flow_keys::VerdictEntry;
pub use super::in_parallel::{InParallel, InParallelConfig};
pub use super::raw_step::RawStep;
pub use super::resource_def::Resource;
pub use super::step::Step;
pub use super::step_keys::{RunConfig, RunSpec, StepAssert, ToolCallAssert};

/// A whole pipeline file.
// `S` is the step: `RawStep` as read, the typed `Step` once loaded.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pipeline<S = Step> {
    /// Things steps fetch with `get:` and publish with `put:` (`git` and `time` are
    /// built in).
    #[serde(default)]
    pub resources: Vec<Resource>,
    /// Resource types written as `check`, `in` and `out` shell scripts.
    #[serde(default)]
    pub resource_types: Vec<super::resource_type::ResourceType>,
    /// Pipeline-wide defaults: the agents' model and dials, `version_history:` (see
    /// `treadle docs agents`).
    #[serde(default)]
    pub defaults: Option<super::defaults::Defaults>,
    /// Agent definitions that `agent:` steps refer to by name.
    #[serde(default)]
    pub agents: Vec<Agent>,
    /// Tasks defined once: a `task:` step without `run:` takes the entry of its name.
    #[serde(default)]
    pub tasks: Vec<At<RawStep>>,
    /// MCP servers agents may be granted with `{ mcp: NAME }`.
    #[serde(default)]
    pub mcp_servers: Vec<super::agent_def::McpServerSpec>,
    /// The jobs; `treadle run --job NAME` picks one when there are several.
    #[serde(default)]
    pub jobs: Vec<Job<S>>,
    /// Shorthand for a file with a single job: its plan, written at the top level.
    #[serde(default)]
    pub plan: Option<Vec<At<S>>>,
    /// Prices per model (`provider/model` or the served name), in US dollars per million
    /// tokens; a model without a price is shown as unpriced.
    #[serde(default)]
    pub prices: super::settings::Prices,
    /// The step cache: its size limit (see `treadle docs caching`).
    #[serde(default)]
    pub cache: Option<super::settings::CacheConfig>,
    /// Limits on what one step may produce (see `treadle docs limits`).
    #[serde(default)]
    pub limits: Option<super::settings::LimitsConfig>,
    /// How step directories are made (`strategy: copy` is what treadle does).
    #[serde(default)]
    pub workspace: Option<super::container::WorkspaceConfig>,
    /// Checks on the whole file under `treadle test`: the jobs that ran, in order.
    #[serde(default)]
    pub assert: Option<PipelineAssert>,
    /// What restoring an agent's session does with an effectful tool call a crash
    /// interrupted: `ask` (the default; a headless step then fails the turn), `run_again`,
    /// `skip` or `fail` (see `treadle docs effects`).
    #[serde(default)]
    pub on_unfinished_effect: Option<treadle_session::EffectPolicy>,
}

/// `assert:` at the top level of the file.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineAssert {
    /// The names of the jobs `treadle test` ran, in order.
    #[serde(default)]
    pub execution: Option<Vec<String>>,
}

impl<S> Pipeline<S> {
    /// This file with `jobs` and `plan` in place of its own, everything else as it is:
    /// the one place a pipeline's fields are copied when its steps change type (typed at
    /// load, or a workflow's agents with no job).
    pub fn with_jobs<T>(self, jobs: Vec<Job<T>>, plan: Option<Vec<At<T>>>) -> Pipeline<T> {
        Pipeline {
            resources: self.resources,
            resource_types: self.resource_types,
            defaults: self.defaults,
            agents: self.agents,
            tasks: self.tasks,
            mcp_servers: self.mcp_servers,
            jobs,
            plan,
            prices: self.prices,
            cache: self.cache,
            limits: self.limits,
            workspace: self.workspace,
            assert: self.assert,
            on_unfinished_effect: self.on_unfinished_effect,
        }
    }

    /// The step output limit in force, in bytes.
    pub fn step_output_limit(&self) -> u64 {
        self.limits.as_ref().map_or(
            super::settings::DEFAULT_STEP_OUTPUT,
            super::settings::LimitsConfig::step_output_bytes,
        )
    }

    /// The hooks `agent` runs with: those of `defaults:` first, then its own.
    pub fn hook_specs(&self, agent: &Agent) -> Vec<super::hook_def::NamedSpec> {
        let defaults = self
            .defaults
            .as_ref()
            .and_then(|d| d.hooks.as_ref())
            .map(|h| h.specs("defaults.hooks"))
            .unwrap_or_default();
        let own = agent
            .hooks
            .as_ref()
            .map(|h| h.specs("hooks"))
            .unwrap_or_default();
        defaults.into_iter().chain(own).collect()
    }
}

impl<S> Pipeline<S> {
    /// The agent `r` refers to. `r` was made by [`super::delegation::resolve`] over this pipeline's agents,
    /// which nothing changes after loading (a workflow's [`crate::workflow::Agents`]
    /// resolves again whenever it changes them), so the index is in range.
    pub fn agent_at(&self, r: AgentRef) -> &Agent {
        &self.agents[r.0]
    }
}

/// A job: a named plan.
// `S` is the step, as in `Pipeline`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job<S = Step> {
    /// Job name (`treadle run --job NAME`).
    pub name: At<String>,
    /// What the job is for (shown by nothing; for the reader).
    #[serde(default)]
    pub description: Option<String>,
    /// A ceiling on the whole run, checked before each step starts: once it has passed,
    /// no further step starts and the job fails.
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// The steps, run in order.
    pub plan: Vec<At<S>>,
    /// Checks on the whole job once it ends.
    #[serde(default)]
    pub assert: Option<JobAssert>,
    /// Under `treadle watch`: at most one build of this job at a time.
    #[serde(default)]
    pub serial: Option<At<bool>>,
    /// Under `treadle watch`: jobs sharing a group never build at the same time.
    #[serde(default)]
    pub serial_groups: Vec<String>,
    /// Under `treadle watch`: at most this many builds of this job at a time (unset:
    /// unlimited, bounded by `--max-concurrent`).
    #[serde(default)]
    pub max_in_flight: Option<At<u32>>,
    /// Under `treadle watch`: `true` lets a shutdown stop a running build of this job at
    /// once; by default a shutdown waits for it (up to ten minutes).
    #[serde(default)]
    pub interruptible: Option<bool>,
    /// Under `treadle watch`: pause the job after this many failed builds in a row, until
    /// `treadle jobs resume NAME`.
    #[serde(default)]
    pub max_consecutive_failures: Option<At<u32>>,
    /// Token budget shared by every agent step of the job.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Runs when the job succeeded.
    #[serde(default)]
    pub on_success: Option<Box<At<S>>>,
    /// Runs when the job failed (a step said no, or a timeout passed).
    #[serde(default)]
    pub on_failure: Option<Box<At<S>>>,
    /// Runs when the job errored (something could not be run).
    #[serde(default)]
    pub on_error: Option<Box<At<S>>>,
    /// Runs when the run was interrupted (Ctrl-C, SIGTERM).
    #[serde(default)]
    pub on_abort: Option<Box<At<S>>>,
    /// Runs whatever happened.
    #[serde(default)]
    pub ensure: Option<Box<At<S>>>,
}

/// `assert:` on a job: checked when it ends.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobAssert {
    /// Names of the top-level steps that ran, in order.
    #[serde(default)]
    pub execution: Option<Vec<String>>,
    /// `success` or `failure`.
    #[serde(default)]
    pub outcome: Option<String>,
}

/// A job's outcome steps, in the order [`Job`] declares them: `on_success`, `on_failure`,
/// `on_error`, `on_abort`, `ensure`.
pub type OutcomeSteps<S> = [Option<Box<At<S>>>; 5];

impl<S> Job<S> {
    /// This job with `plan` and `outcome` steps in place of its own, everything else as it
    /// is: the one place a job's fields are copied when its steps change type (typed at
    /// load, or a workflow's job that starts empty).
    pub fn with_steps<T>(self, plan: Vec<At<T>>, outcome: OutcomeSteps<T>) -> Job<T> {
        let [on_success, on_failure, on_error, on_abort, ensure] = outcome;
        Job {
            name: self.name,
            description: self.description,
            timeout: self.timeout,
            plan,
            assert: self.assert,
            serial: self.serial,
            serial_groups: self.serial_groups,
            max_in_flight: self.max_in_flight,
            interruptible: self.interruptible,
            max_consecutive_failures: self.max_consecutive_failures,
            budget: self.budget,
            on_success,
            on_failure,
            on_error,
            on_abort,
            ensure,
        }
    }

    /// The job's plan and outcome steps taken out of it (left empty), to be given back
    /// changed with [`Self::with_steps`].
    pub fn take_steps(&mut self) -> (Vec<At<S>>, OutcomeSteps<S>) {
        let outcome = [
            &mut self.on_success,
            &mut self.on_failure,
            &mut self.on_error,
            &mut self.on_abort,
            &mut self.ensure,
        ]
        .map(Option::take);
        (std::mem::take(&mut self.plan), outcome)
    }

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
