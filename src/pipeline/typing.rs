//! What typing a written step ([`RawStep`]) takes besides [`super::step`]: the keys of an
//! agent or task step taken out of it, the keys of one kind found on a step of another (a
//! located load error), and an `ensemble:` expanded before its members are typed.

use super::agent_call::{AgentCall, TaskKeys};
use super::at::{At, Pos};
use super::ensemble::{Ensemble, Rule};
use super::format::RawStep;

impl AgentCall {
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

impl Ensemble<RawStep> {
    /// Gives every member the block's vocabulary, and makes the judge's step when
    /// `decide:` names an agent. A member that writes `verdicts:` of its own keeps them
    /// (the checks refuse it).
    pub fn expand(&mut self) {
        let verdicts = self.bare_verdicts();
        for member in &mut self.agents {
            if member.verdicts.is_none() {
                member.value.verdicts = Some(verdicts.clone());
            }
        }
        self.judge = match (self.rule(), &self.decide) {
            (Rule::Judge(agent), Some(decide)) => Some(Box::new(At {
                value: RawStep {
                    agent: Some(At {
                        value: agent.to_owned(),
                        pos: decide.pos,
                    }),
                    prompt: Some(String::new()),
                    verdicts: Some(verdicts),
                    // Its prompt is the votes of this run, which its key cannot see.
                    volatile: true,
                    ..RawStep::default()
                },
                pos: decide.pos,
            })),
            _ => None,
        };
    }
}
