//! The written form of one step ([`RawStep`]): every key any kind takes, in one flat
//! mapping, so that an unknown key is reported where it is written. Loading types it
//! ([`super::typing`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::agent_def::Budget;
use super::at::At;
use super::duration::DurationSpec;
use super::flow_keys::{Axis, Race, To, VerdictEntry, When};
use super::in_parallel::InParallel;
use super::step_keys::{RunSpec, StepAssert};

/// One step of a plan. Exactly one of the kind keys (`task`, `agent`, `approval`, `get`,
/// `put`, `do`, `in_parallel`, `try`, `race`, `ensemble`, `load_var`, `http`) must be set.
// The wire form (these docs are the JSON Schema's): loading turns it into a typed
// `super::step::Step`, once (`super::typing::Typer`).
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
    /// the decision (see `treadle docs agents`).
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
    /// Sends one HTTP request; the value is the step's name.
    #[serde(default)]
    pub http: Option<At<String>>,
    /// With `http:`, the URL (http or https).
    #[serde(default)]
    pub url: Option<At<String>>,
    /// With `http:`, the method (default `GET`).
    #[serde(default)]
    pub method: Option<At<String>>,
    /// With `http:`, headers with literal values.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// With `http:`, headers whose values are read at run time from the environment
    /// variable named (header name → variable name).
    #[serde(default)]
    pub secret_headers: Option<BTreeMap<String, String>>,
    /// With `http:`, the request body.
    #[serde(default)]
    pub body: Option<String>,
    /// With `http:`, the statuses that count as success (default any 2xx).
    #[serde(default)]
    pub expect: Option<Vec<u16>>,
    /// With `http:`, whether redirects are followed (default true).
    #[serde(default)]
    pub follow_redirects: Option<bool>,
    /// With `http:`, the artifact the response is written to (files `body` and `status`).
    #[serde(default)]
    pub output: Option<At<String>>,

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
    /// With `verdicts:`, also take a final answer whose whole text is one of the verdicts
    /// (a weak model that answers `approve` instead of calling `verdict`); off by default.
    #[serde(default)]
    pub verdict_from_text: Option<At<bool>>,
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
    /// Directories kept across runs of the step, or writable under `$HOME`
    /// (`crate::pipeline::caches`).
    #[serde(default)]
    pub caches: Vec<At<super::caches::Cache>>,
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
    /// What the step's commands may connect to (`none`, `loopback`, `any`, a list of
    /// `host:port`; with `image:`, a container network name too).
    #[serde(default)]
    pub network: Option<At<super::network::Network>>,
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
    /// A task or agent step that fails keeps its outputs (`<run>/kept/<step>/`), from which
    /// a `--rerun` of the step starts.
    #[serde(default)]
    pub keep_on_failure: Option<At<bool>>,
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
