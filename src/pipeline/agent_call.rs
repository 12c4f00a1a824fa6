//! The typed keys of an `agent:` step ([`AgentCall`]) and of a `task:` step that only a
//! task takes ([`TaskKeys`]), taken out of a written [`RawStep`] once, when it is typed;
//! and the keys of one kind found on a step of another (a located load error).

use std::collections::BTreeMap;

use super::at::{At, Pos};
use super::flow::VerdictEntry;
use super::format::{Budget, RawStep};
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
            escalate_to: None,
            max_turns: None,
            dir: None,
            context_paths: None,
            max_context_bytes: None,
            prompt_file: None,
        }
    }

    /// Takes the agent keys out of `raw` (the step's `agent:` already taken, as `agent`).
    pub(super) fn take(agent: At<String>, raw: &mut RawStep) -> Self {
        Self {
            agent,
            prompt: raw.prompt.take(),
            messages: raw.messages.take(),
            tools: raw.tools.take(),
            verdicts: raw.verdicts.take(),
            budget: raw.budget.take(),
            commit: raw.commit.take(),
            output_schema: raw.output_schema.take(),
            min_confidence: raw.min_confidence.take(),
            escalate_to: raw.escalate_to.take(),
            max_turns: raw.max_turns.take(),
            dir: raw.dir.take(),
            context_paths: raw.context_paths.take(),
            max_context_bytes: raw.max_context_bytes.take(),
            prompt_file: raw.prompt_file.take(),
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

impl TaskKeys {
    /// Takes the task keys out of `raw`.
    pub(super) fn take(raw: &mut RawStep) -> Self {
        Self {
            fix: raw.fix.take(),
            input_mapping: raw.input_mapping.take(),
            output_mapping: raw.output_mapping.take(),
        }
    }
}

/// A key of `agent:` or `task:` steps written on a step of another kind (found once the
/// kind is known, reported with the step's name, at the key where it has a position).
pub(super) struct Misplaced {
    /// The key, as written.
    pub key: &'static str,
    /// The steps it belongs to, for the hint.
    pub kinds: &'static str,
    /// Where it is written, when known (else the step's position is used).
    pub pos: Option<Pos>,
}

impl RawStep {
    /// The keys of agent or task steps that `raw` carries although its kind is `key`,
    /// besides those [`RawStep::specific_keys`] reports.
    pub(super) fn misplaced(&self, key: &str) -> Vec<Misplaced> {
        let (is_task, is_agent) = (key == "task", key == "agent");
        let mut out = Vec::new();
        let mut add = |present: bool, key, kinds, pos| {
            if present {
                out.push(Misplaced { key, kinds, pos });
            }
        };
        const TASKS: &str = "task steps";
        const AGENTS: &str = "agent steps";
        let f = &self.fix;
        add(
            !is_task && f.is_some(),
            "fix",
            TASKS,
            f.as_ref().map(|f| f.pos),
        );
        let d = &self.dir;
        add(
            !is_agent && d.is_some(),
            "dir",
            AGENTS,
            d.as_ref().map(|d| d.pos),
        );
        let m = &self.max_turns;
        let pos = m.as_ref().map(|m| m.pos);
        add(!is_agent && m.is_some(), "max_turns", AGENTS, pos);
        let c = &self.context_paths;
        let pos = c.as_ref().and_then(|c| c.first()).map(|c| c.pos);
        add(!is_agent && c.is_some(), "context_paths", AGENTS, pos);
        let p = &self.prompt_file;
        let pos = p.as_ref().map(|p| p.pos);
        add(!is_agent && p.is_some(), "prompt_file", AGENTS, pos);
        let mapping = self.input_mapping.as_ref().or(self.output_mapping.as_ref());
        let pos = mapping.map(|m| m.pos);
        add(!is_task && mapping.is_some(), "input_mapping", TASKS, pos);
        out
    }
}
