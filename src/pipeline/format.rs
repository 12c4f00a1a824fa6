//! The pipeline file format: the types a `treadle.yml` deserializes into.
//!
//! The keys follow Concourse and `steps`: `resources`, `agents`, `jobs`, each job a `plan`
//! of steps. A step is one mapping that names its kind with one key (`task:`, `agent:`,
//! `approval:`, `get:`, `put:`, `do:`, `in_parallel:`, `try:`) next to the keys every step
//! takes (`inputs`, `outputs`, `env`, `timeout`, `attempts`, hooks). The mapping is read
//! into one flat [`RawStep`] so that an unknown key is reported where it is written; which
//! keys belong to which kind is decided when loading types it ([`super::step`]).
//!
//! Every struct denies unknown fields: a typo is a load error, never silently ignored.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use super::agent_def::{Agent, AgentSource, Budget, McpServerSpec};
use super::at::At;
use super::duration::DurationSpec;
pub use super::flow::VerdictEntry;
use super::flow::{Axis, Race, To, When};
pub use super::step::Step;
pub use super::step_keys::{RunConfig, RunSpec};

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
    /// docs/agents.md).
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
    /// The step cache: its size limit (see docs/caching.md).
    #[serde(default)]
    pub cache: Option<super::settings::CacheConfig>,
    /// Limits on what one step may produce (see docs/limits.md).
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
    /// `skip` or `fail` (see docs/effects.md).
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

/// A resource (`get:` / `put:` target).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resource {
    /// Name steps use in `get:` and `put:`.
    pub name: At<String>,
    /// Resource type; `git` is built in.
    #[serde(rename = "type")]
    pub kind: At<String>,
    /// Type-specific settings, e.g. `{ uri, branch }` for git.
    #[serde(default)]
    pub source: BTreeMap<String, serde_json::Value>,
    /// The environment variable holding the token `POST /hooks/check/NAME` must carry
    /// (its name, never the token itself; see docs/watch.md).
    #[serde(default)]
    pub webhook_token_env: Option<At<String>>,
    /// Variables passed to this resource's scripts by name, besides its type's `env:`.
    #[serde(default)]
    pub env: Vec<At<String>>,
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

/// One step of a plan. Exactly one of the kind keys (`task`, `agent`, `approval`, `get`,
/// `put`, `do`, `in_parallel`, `try`, `race`, `ensemble`, `load_var`) must be set.
// The wire form (these docs are the JSON Schema's): loading turns it into a typed
// `super::step::Step`, once (`super::step::Typer`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Step")]
pub struct RawStep {
    // ---- kinds ----
    /// A shell task; the value is the step's name.
    #[serde(default)]
    pub task: Option<At<String>>,
    /// An agent step; the value names an entry of `agents:`.
    #[serde(default)]
    pub agent: Option<At<String>>,
    /// Parks the run until a person approves; the value is the step's name.
    #[serde(default)]
    pub approval: Option<At<super::step_keys::Approval>>,
    /// Parks the run until a person answers `question:` with a value that fits `schema:`;
    /// the value is the step's name. The answer is written as JSON to `answer.json` in the
    /// step's `outputs:`.
    #[serde(default)]
    pub input: Option<At<String>>,
    /// Fetches a resource into an artifact of the same name.
    #[serde(default)]
    pub get: Option<At<String>>,
    /// Publishes to a resource.
    #[serde(default)]
    pub put: Option<At<String>>,
    /// Runs the nested steps in order.
    #[serde(default, rename = "do")]
    pub do_: Option<Vec<At<RawStep>>>,
    /// Runs the nested steps at the same time.
    #[serde(default)]
    pub in_parallel: Option<InParallel<RawStep>>,
    /// Runs the nested step and succeeds whatever it does (unless the run is aborted).
    #[serde(default, rename = "try")]
    pub try_: Option<Box<At<RawStep>>>,
    /// Runs the nested steps at once; the first to succeed wins, the others are cancelled.
    #[serde(default)]
    pub race: Option<Race<RawStep>>,
    /// Several agents answer in one vocabulary; a rule decides, and the block routes on
    /// the decision (see docs/agents.md).
    #[serde(default)]
    pub ensemble: Option<At<super::ensemble::Ensemble<RawStep>>>,
    /// Reads a file of the step's inputs into the var of this name, for `((name))` in the
    /// steps after it.
    #[serde(default)]
    pub load_var: Option<At<String>>,
    /// With `load_var:`, the file: `ARTIFACT/path`, inside one of the step's inputs. In a
    /// `tasks:` entry: a YAML file holding the task (keys written beside it win).
    #[serde(default)]
    pub file: Option<At<String>>,

    // ---- control flow ----
    /// What the step is for (for the reader).
    #[serde(default)]
    pub description: Option<String>,
    /// A guard command: the step runs only when it exits 0, else it is skipped.
    #[serde(default)]
    pub when: Option<At<When>>,
    /// Where the plan goes next after a success or a failure.
    #[serde(default)]
    pub to: Option<At<To>>,
    /// Runs the step once per combination of these variables' values.
    #[serde(default)]
    pub across: Option<At<Vec<Axis>>>,
    /// With `across:`, how many cells run at once (default 1).
    #[serde(default)]
    pub max_in_flight: Option<At<u32>>,
    /// With `across:`, start no further cell once one failed (default false).
    #[serde(default)]
    pub fail_fast: Option<bool>,

    // ---- naming ----
    /// Step name, when the kind key does not give one (e.g. two steps of the same agent).
    #[serde(default)]
    pub name: Option<At<String>>,

    // ---- task ----
    /// The command: a string run with `sh -c`, or `{ path, args, dir }` run directly.
    #[serde(default)]
    pub run: Option<At<RunSpec>>,

    // ---- agent ----
    /// The agent step's instruction.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The instruction as several user messages (joined by blank lines).
    #[serde(default)]
    pub messages: Option<Vec<String>>,
    /// Narrows the agent's tool grant for this step (it cannot widen it).
    #[serde(default)]
    pub tools: Option<Vec<At<String>>>,
    /// The choices the agent must pick from: `- choice` continues in order,
    /// `- choice: step` routes the plan, `- failure: step` catches a failed step.
    #[serde(default)]
    pub verdicts: Option<Vec<VerdictEntry>>,
    /// Token budget for this step.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Commit what the agent changed in a git input to that input's branch, with this
    /// message; without it the agent's changes there are wiped.
    #[serde(default)]
    pub commit: Option<String>,
    /// The agent's answer as JSON checked against a schema, written to one of `outputs:`.
    #[serde(default)]
    pub output_schema: Option<At<super::controls::OutputSchema>>,
    /// With `verdicts:`, the least confidence (0 to 1) a verdict needs; below it the
    /// decision escalates (see `escalate_to`).
    #[serde(default)]
    pub min_confidence: Option<At<f64>>,
    /// Where a verdict below `min_confidence` goes: `human` (the default, an approval) or
    /// the name of a stronger agent of this file, which decides again.
    #[serde(default)]
    pub escalate_to: Option<At<String>>,
    /// Upper bound on model requests in this step (wins over the agent's).
    #[serde(default)]
    pub max_turns: Option<At<u32>>,
    /// The agent's working directory: `ARTIFACT/sub/dir`, inside one of the step's inputs
    /// or outputs; tool paths are relative to it.
    #[serde(default)]
    pub dir: Option<At<String>>,
    /// Files (relative to the step directory) handed to the agent before its first turn.
    #[serde(default)]
    pub context_paths: Option<Vec<At<String>>>,
    /// The most bytes of one tool result or context file put into the conversation (wins
    /// over the agent's).
    #[serde(default)]
    pub max_context_bytes: Option<super::settings::SizeSpec>,
    /// Decisions of other steps handed to this one.
    #[serde(default)]
    pub context: Option<At<super::step_keys::StepContext>>,
    /// The prompt, from a file beside the pipeline or inside an input.
    #[serde(default)]
    pub prompt_file: Option<At<super::step_keys::PromptFile>>,
    /// A task's command, from a file beside the pipeline (read at load).
    #[serde(default)]
    pub run_file: Option<At<String>>,
    /// An agent that repairs this task when its command fails; the command then runs again.
    #[serde(default)]
    pub fix: Option<At<super::step_keys::Fix>>,
    /// Inputs seen under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    #[serde(default)]
    pub input_mapping: Option<At<BTreeMap<String, String>>>,
    /// Outputs collected under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    #[serde(default)]
    pub output_mapping: Option<At<BTreeMap<String, String>>>,

    // ---- approval ----
    /// Text shown to the person asked.
    #[serde(default)]
    pub message: Option<String>,
    /// What happens when an approval's `timeout` passes: `approve` or `reject`.
    #[serde(default)]
    pub on_timeout: Option<At<String>>,

    // ---- input ----
    /// What an `input:` step asks.
    #[serde(default)]
    pub question: Option<At<String>>,
    /// The JSON Schema (written in YAML) the answer must fit; default: any string.
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
    /// The only answers allowed (strings).
    #[serde(default)]
    pub choices: Option<Vec<String>>,
    /// The answer taken when the step's `timeout:` passes; without it the step fails then.
    #[serde(default)]
    pub default: Option<serde_json::Value>,

    // ---- get / put ----
    /// The resource, when the step's name differs from it.
    #[serde(default)]
    pub resource: Option<At<String>>,
    /// Resource-specific parameters.
    #[serde(default)]
    pub params: Option<BTreeMap<String, serde_json::Value>>,
    /// On a get: `latest` (default), `every`, or a pinned `{ key: value }` version.
    #[serde(default)]
    pub version: Option<At<super::resource_type::VersionSpec>>,
    /// On a `get`: `treadle watch` checks the resource and builds the job when it has a
    /// new version.
    #[serde(default)]
    pub trigger: Option<At<bool>>,
    /// On a `get`: only versions that were green together in one build of each named job.
    #[serde(default)]
    pub passed: Option<At<Vec<At<String>>>>,

    // ---- every step ----
    /// Artifacts this step sees, each as a read-only directory of that name; on a put,
    /// `all`: every artifact produced so far.
    #[serde(default, deserialize_with = "super::resource_type::inputs_or_all")]
    pub inputs: Vec<At<String>>,
    /// Artifacts this step makes: an empty directory each, collected after it succeeds.
    #[serde(default)]
    pub outputs: Vec<At<String>>,
    /// Extra environment variables: `{ NAME: value }`; a list of names is read as
    /// `pass_env:` (the spelling of `steps`).
    #[serde(default)]
    pub env: super::container::Env,
    /// Variables of treadle's own environment the step's commands inherit besides the
    /// allow-list (API-key variables are never there to pass).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// `false`: the step's commands are not confined to the step directory (a deploy, a
    /// build that reads the project). Default `true`.
    #[serde(default)]
    pub confined: Option<bool>,
    /// Kill the step after this long (per attempt).
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// Run the step up to this many times until it succeeds (default 1).
    #[serde(default)]
    pub attempts: Option<At<u32>>,
    /// How many times a verdict may route the plan back to this step in one run.
    #[serde(default)]
    pub max_visits: Option<At<u32>>,
    /// Deterministic checks of what the step did.
    #[serde(default)]
    pub assert: Option<At<StepAssert>>,
    /// The container image the step's commands need (treadle has no container runtime:
    /// such a step fails saying so, and `validate` warns).
    #[serde(default)]
    pub image: Option<At<String>>,
    /// With `image:`, the container's network (`none`, `host`, `bridge`, a name).
    #[serde(default)]
    pub network: Option<At<String>>,
    /// With `image:`, run the container privileged.
    #[serde(default)]
    pub privileged: Option<At<bool>>,
    /// With `image:`, the user the container's commands run as.
    #[serde(default)]
    pub user: Option<At<String>>,
    /// With `image:`, the container's CPU share and memory cap.
    #[serde(default)]
    pub container_limits: Option<At<super::container::ContainerLimits>>,
    /// Never replay this step from the cache (it reads something its key cannot see).
    #[serde(default)]
    pub volatile: bool,
    /// Runs after the step succeeded; its failure fails the step.
    #[serde(default)]
    pub on_success: Option<Box<At<RawStep>>>,
    /// Runs after the step failed; the step stays failed.
    #[serde(default)]
    pub on_failure: Option<Box<At<RawStep>>>,
    /// Runs after the step errored (it could not be run); the step stays errored.
    #[serde(default)]
    pub on_error: Option<Box<At<RawStep>>>,
    /// Runs after the run was interrupted during the step.
    #[serde(default)]
    pub on_abort: Option<Box<At<RawStep>>>,
    /// Runs after the step whatever happened; its failure fails the step.
    #[serde(default)]
    pub ensure: Option<Box<At<RawStep>>>,
}

/// `in_parallel:` either as a list of steps or as `{ steps, limit, fail_fast }`.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum InParallel<S = Step> {
    /// A bare list: `in_parallel: [step, step]`.
    Steps(Vec<At<S>>),
    /// The long form.
    Config(InParallelConfig<S>),
}

/// The long form of `in_parallel:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InParallelConfig<S = Step> {
    /// The steps to run together.
    pub steps: Vec<At<S>>,
    /// At most this many at once (default: all).
    #[serde(default)]
    pub limit: Option<At<u32>>,
    /// Interrupt the others as soon as one fails (default false).
    #[serde(default)]
    pub fail_fast: bool,
}

impl<S> InParallel<S> {
    /// The nested steps.
    pub fn steps(&self) -> &[At<S>] {
        match self {
            Self::Steps(s) => s,
            Self::Config(c) => &c.steps,
        }
    }
    /// The concurrency limit, if any.
    pub fn limit(&self) -> Option<u32> {
        match self {
            Self::Config(c) => c.limit.as_ref().map(|l| l.value),
            _ => None,
        }
    }
    /// Whether one failure interrupts the others.
    pub fn fail_fast(&self) -> bool {
        matches!(self, Self::Config(c) if c.fail_fast)
    }
}

// A visitor, not `#[serde(untagged)]`: untagged buffers the input and loses both the
// locations of nested values and the precise error of the form the user meant.
impl<'de, S: Deserialize<'de>> Deserialize<'de> for InParallel<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<S>(std::marker::PhantomData<S>);
        impl<'de, S: Deserialize<'de>> Visitor<'de> for V<S> {
            type Value = InParallel<S>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of steps, or a mapping with `steps`, `limit`, `fail_fast`")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<InParallel<S>, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(InParallel::Steps)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<InParallel<S>, A::Error> {
                InParallelConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(InParallel::Config)
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `assert:` on a step: facts checked after it ran.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepAssert {
    /// Paths (relative to the step directory, e.g. `report/summary.md`) that must exist
    /// and be non-empty.
    #[serde(default)]
    pub files: Vec<String>,
    /// Text the step's standard output must contain.
    #[serde(default)]
    pub stdout: Option<String>,
    /// Text the step's standard output or its standard error must contain (a task's two
    /// streams; an agent's final answer).
    #[serde(default)]
    pub output: Option<String>,
    /// The exit code a task must end with.
    #[serde(default)]
    pub code: Option<i32>,
    /// The verdict an agent must have picked.
    #[serde(default)]
    pub verdict: Option<String>,
    /// Tool calls the agent must have made, in this order (others may come between);
    /// `args` matches as a subset of the call's arguments.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallAssert>,
}

/// One expected tool call.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallAssert {
    /// Tool name.
    pub name: String,
    /// Arguments that must appear in the call (a subset match).
    #[serde(default)]
    pub args: Option<serde_json::Value>,
    /// `true`: the call must have run and succeeded (not refused, not an error).
    #[serde(default)]
    pub ok: Option<bool>,
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
