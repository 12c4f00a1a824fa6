//! The typed keys of an `agent:` step ([`AgentCall`]: the agent it names, resolved to
//! its definition, and its [`Prompt`]) and of a `task:` step that only a task takes
//! ([`TaskKeys`]). They are taken out of a written step when it is typed
//! ([`super::typing`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::agent_def::{Agent, Budget};
use super::at::At;
use super::flow_keys::VerdictEntry;
use super::settings::SizeSpec;
use super::step_keys::{ArtifactFile, FixSpec};

/// An `agent:` step: the agent it names and the keys only an agent step takes.
/// [`AgentCall::new`] is one with none set (a step made in code sets what it needs).
#[derive(Debug, Clone)]
pub struct AgentCall {
    /// The value of `agent:` as written (where the step names it).
    pub agent: At<String>,
    /// The definition under `agents:` that `agent:` names, resolved when the file is
    /// loaded: nothing after loading asks which agent a step runs.
    pub def: Arc<Agent>,
    /// The instruction.
    pub prompt: Prompt,
    /// Narrows the agent's tool grant for this step (it cannot widen it).
    pub tools: Option<Vec<At<String>>>,
    /// The choices the agent must pick from: `- choice` continues in order,
    /// `- choice: step` routes the plan, `- failure: step` catches a failed step.
    pub verdicts: Option<Vec<VerdictEntry>>,
    /// Token budget for this step.
    pub budget: Option<Budget>,
    /// Commit what the agent changed in a git input to that input's branch, with this
    /// message; without it the agent's changes there are wiped.
    pub commit: Option<String>,
    /// The agent's answer as JSON checked against a schema, written to one of `outputs:`.
    pub output_schema: Option<At<super::controls::OutputSchema>>,
    /// With `verdicts:`, the least confidence (0 to 1) a verdict needs; below it the
    /// decision escalates (see `escalate_to`).
    pub min_confidence: Option<At<f64>>,
    /// With `verdicts:`, a final answer whose whole text is one of the verdicts counts as
    /// that verdict (off by default).
    pub verdict_from_text: Option<At<bool>>,
    /// Where a verdict below `min_confidence` goes: `human` (the default, an approval) or
    /// a stronger agent of this file, which decides again (resolved at load).
    pub escalate_to: Option<At<EscalateTo>>,
    /// Upper bound on model requests in this step (wins over the agent's).
    pub max_turns: Option<At<u32>>,
    /// The agent's working directory: `ARTIFACT/sub/dir`, inside one of the step's inputs
    /// or outputs; tool paths are relative to it.
    pub dir: Option<At<String>>,
    /// Files (relative to the step directory) handed to the agent before its first turn.
    pub context_paths: Option<Vec<At<String>>>,
    /// The most bytes of one tool result or context file put into the conversation (wins
    /// over the agent's).
    pub max_context_bytes: Option<SizeSpec>,
}

/// `escalate_to:` of an agent step, resolved at load.
#[derive(Debug, Clone)]
pub enum EscalateTo {
    /// `human`: an approval of the verdict.
    Human,
    /// Another agent of the file.
    Agent(Arc<Agent>),
}

/// `fix:` of a task, its agent resolved at load.
#[derive(Debug, Clone)]
pub struct Fixer {
    /// The overrides as written (all empty for `fix: NAME`).
    pub spec: FixSpec,
    /// The agent that repairs the task.
    pub def: Arc<Agent>,
}

/// An agent step's instruction: one of `prompt:`, `messages:` and `prompt_file:` (the form
/// of a file beside the pipeline is read into [`Prompt::Text`] by loading). A step with
/// none has an empty text.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// `prompt:` (or `prompt_file: PATH`, read at load).
    Text(String),
    /// `messages:`, several user messages (joined by blank lines).
    Messages(Vec<String>),
    /// `prompt_file: { artifact, path }`: a file inside an input, read when the step runs.
    File(ArtifactFile),
}

impl Default for Prompt {
    fn default() -> Self {
        Self::Text(String::new())
    }
}

impl Prompt {
    /// The texts known at load (none for a file read at run time), in order.
    pub fn texts(&self) -> Vec<&str> {
        match self {
            Self::Text(t) => vec![t.as_str()],
            Self::Messages(m) => m.iter().map(String::as_str).collect(),
            Self::File(_) => Vec::new(),
        }
    }

    /// The instruction known at load, its texts separated by blank lines.
    pub fn joined(&self) -> String {
        self.texts().join("\n\n")
    }

    /// The file inside an input to read when the step runs, if it is one.
    pub fn file(&self) -> Option<&ArtifactFile> {
        match self {
            Self::File(f) => Some(f),
            Self::Text(_) | Self::Messages(_) => None,
        }
    }
}

impl AgentCall {
    /// A call of the agent `def` with no other key set, naming it as its definition does.
    pub fn new(def: Arc<Agent>) -> Self {
        Self {
            agent: def.name.clone(),
            def,
            prompt: Prompt::default(),
            tools: None,
            verdicts: None,
            budget: None,
            commit: None,
            output_schema: None,
            min_confidence: None,
            verdict_from_text: None,
            escalate_to: None,
            max_turns: None,
            dir: None,
            context_paths: None,
            max_context_bytes: None,
        }
    }
}

/// What only a `task:` step takes besides its command.
#[derive(Debug, Clone, Default)]
pub struct TaskKeys {
    /// An agent that repairs this task when its command fails; the command then runs again.
    pub fix: Option<At<Fixer>>,
    /// Inputs seen under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    pub input_mapping: Option<At<BTreeMap<String, String>>>,
    /// Outputs collected under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    pub output_mapping: Option<At<BTreeMap<String, String>>>,
}

impl TaskKeys {
    /// The artifacts the task sees under another name (`input_mapping:`,
    /// `output_mapping:`), as `(artifact, name in the step directory)`.
    pub fn mounts(&self) -> Vec<(String, String)> {
        [&self.input_mapping, &self.output_mapping]
            .into_iter()
            .flatten()
            .flat_map(|m| m.value.iter())
            .map(|(inner, artifact)| (artifact.clone(), inner.clone()))
            .collect()
    }
}
