//! The typed keys of an `agent:` step ([`AgentCall`]) and of a `task:` step that only a
//! task takes ([`TaskKeys`]). They are taken out of a written step when it is typed
//! ([`super::typing`]).

use std::collections::BTreeMap;

use super::agent_def::Budget;
use super::at::At;
use super::flow_keys::VerdictEntry;
use super::settings::SizeSpec;
use super::step_keys::{Fix, PromptFile};

/// An `agent:` step: the agent it names and the keys only an agent step takes.
/// [`AgentCall::new`] is one with none set (a step made in code sets what it needs).
#[derive(Debug, Clone)]
pub struct AgentCall {
    /// The value of `agent:`, an entry of `agents:`.
    pub agent: At<String>,
    /// The instruction.
    pub prompt: Option<String>,
    /// The instruction as several user messages (joined by blank lines).
    pub messages: Option<Vec<String>>,
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
    /// the name of a stronger agent of this file, which decides again.
    pub escalate_to: Option<At<String>>,
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
    /// The prompt from a file inside an input, read at run time (the form of a file beside
    /// the pipeline is read into `prompt` by loading).
    pub prompt_file: Option<At<PromptFile>>,
}

impl AgentCall {
    /// A call of `agent` with no other key set.
    pub fn new(agent: At<String>) -> Self {
        Self {
            agent,
            prompt: None,
            messages: None,
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
            prompt_file: None,
        }
    }
}

/// What only a `task:` step takes besides its command.
#[derive(Debug, Clone, Default)]
pub struct TaskKeys {
    /// An agent that repairs this task when its command fails; the command then runs again.
    pub fix: Option<At<Fix>>,
    /// Inputs seen under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    pub input_mapping: Option<At<BTreeMap<String, String>>>,
    /// Outputs collected under another name: `{ NAME_IN_STEP: ARTIFACT }`.
    pub output_mapping: Option<At<BTreeMap<String, String>>>,
}
