//! The keys of task and agent steps that point elsewhere: `fix:` (an agent that repairs a
//! failing task), `context: { from }` (another step's decision, delivered), and
//! `prompt_file:` (the prompt in a file, or in an artifact read at run time), the
//! mapping form of `approval:`, and a task's `run:` in both its forms.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::at::At;
use super::duration::DurationSpec;

/// `fix:`: an agent name, or a mapping with per-task overrides.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum Fix {
    /// `fix: fixer`.
    Agent(String),
    /// The mapping form.
    Spec(FixSpec),
}

/// The mapping form of `fix:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixSpec {
    /// The agent (an entry of `agents:`) that repairs the task.
    pub agent: At<String>,
    /// What the fixer is told besides the failing command and its output.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The fixer's working directory, inside the task's directory.
    #[serde(default)]
    pub dir: Option<At<String>>,
    /// Narrows the fixer's tool grant.
    #[serde(default)]
    pub tools: Option<Vec<At<String>>>,
    /// Model-request attempts of the fixer.
    #[serde(default)]
    pub attempts: Option<At<u32>>,
    /// How long the fixer may take.
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
}

impl Fix {
    /// The fixer's agent name.
    pub fn agent(&self) -> &str {
        match self {
            Self::Agent(a) => a,
            Self::Spec(s) => &s.agent.value,
        }
    }

    /// The overrides (all empty for the name form).
    pub fn spec(&self) -> FixSpec {
        match self {
            Self::Agent(a) => FixSpec {
                agent: At::new(a.clone()),
                ..FixSpec::default()
            },
            Self::Spec(s) => s.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for Fix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fix;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an agent name, or a mapping with `agent` and its overrides")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Fix, E> {
                Ok(Fix::Agent(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Fix, A::Error> {
                FixSpec::deserialize(de::value::MapAccessDeserializer::new(map)).map(Fix::Spec)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `context:` of a step: what it is handed from other steps.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepContext {
    /// Step name -> how much of its decision: `verdict`, `note` or `full`.
    pub from: BTreeMap<String, At<String>>,
}

/// The levels `context: { from }` may ask for.
pub const CONTEXT_LEVELS: [&str; 3] = ["verdict", "note", "full"];

/// `prompt_file:`: a file beside the pipeline (read at load), or a file inside an input
/// artifact (read when the step runs).
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum PromptFile {
    /// `prompt_file: prompts/review.md`.
    Path(String),
    /// `prompt_file: { artifact: repo, path: .ci/REVIEW.md }`.
    Artifact(ArtifactFile),
}

/// A file inside an artifact.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactFile {
    /// The artifact: one of the step's `inputs:`.
    pub artifact: At<String>,
    /// The file, relative to the artifact.
    pub path: At<String>,
}

impl<'de> Deserialize<'de> for PromptFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PromptFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path, or a mapping with `artifact` and `path`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PromptFile, E> {
                Ok(PromptFile::Path(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PromptFile, A::Error> {
                ArtifactFile::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PromptFile::Artifact)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `approval:`: the step's name, or a mapping with the approval's `message:`, `timeout:`
/// and `on_timeout:` (moved to the step's own keys when the file is loaded) and its policy
/// (who answers, how many, what the deadline does: [`super::approval_policy`]).
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum Approval {
    /// `approval: publish`.
    Name(String),
    /// `approval: { message, timeout, assignees, approvers, on_timeout, escalate_to }`.
    Spec(ApprovalSpec),
}

/// The mapping form of `approval:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSpec {
    /// The step's name (default `approval`).
    #[serde(default)]
    pub name: Option<String>,
    /// Text shown to the person asked.
    #[serde(default)]
    pub message: Option<String>,
    /// How long to wait for an answer: the deadline.
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// The user names allowed to answer (anyone when empty).
    #[serde(default)]
    pub assignees: Vec<At<String>>,
    /// How many distinct people must approve (default 1); one rejection rejects.
    #[serde(default)]
    pub approvers: Option<At<u32>>,
    /// What the deadline does: `approve`, `reject` (the default) or `escalate`.
    #[serde(default)]
    pub on_timeout: Option<At<String>>,
    /// With `on_timeout: escalate`, who may answer after the deadline (one of them
    /// decides alone).
    #[serde(default)]
    pub escalate_to: Vec<At<String>>,
    /// With `on_timeout: escalate`, how long the escalation waits before it rejects
    /// (default: no second deadline).
    #[serde(default)]
    pub escalate_timeout: Option<At<DurationSpec>>,
}

impl Approval {
    /// The step's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(n) => n,
            Self::Spec(s) => s.name.as_deref().unwrap_or("approval"),
        }
    }
}

impl<'de> Deserialize<'de> for Approval {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Approval;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the step's name, or a mapping with `message` and `timeout`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Approval, E> {
                Ok(Approval::Name(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Approval, A::Error> {
                ApprovalSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Approval::Spec)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A task's command.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum RunSpec {
    /// `run: "make test"`: a shell command line, run with `sh -c`.
    Shell(String),
    /// `run: { path: make, args: [test] }`: a program run directly, as in Concourse.
    Exec(RunConfig),
}

/// The Concourse form of a command.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The program (looked up in PATH, or relative to the step directory).
    pub path: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory, relative to the step directory.
    #[serde(default)]
    pub dir: Option<String>,
}

impl<'de> Deserialize<'de> for RunSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RunSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a shell command string, or a mapping with `path` and `args`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(v))
            }
            // `run: true` and `run: 7` are commands too: YAML types them, the shell does not.
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RunSpec, A::Error> {
                RunConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RunSpec::Exec)
            }
        }
        deserializer.deserialize_any(V)
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
