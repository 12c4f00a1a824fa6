//! Typing an agent step (and a task's `fix:`): the agent it names resolved to its
//! definition, `escalate_to:` likewise, and `prompt:`/`messages:`/`prompt_file:` made one
//! [`Prompt`]. Part of [`super::typing::Typer`], kept apart so that each file stays one
//! concern.

use std::sync::Arc;

use super::agent_call::{AgentCall, EscalateTo, Fixer, Prompt, TaskKeys};
use super::agent_def::Agent;
use super::at::At;
use super::diagnostic::{Diagnostic, Problem};
use super::raw_step::RawStep;
use super::typing::Typer;

impl AgentCall {
    /// Takes the agent keys out of `raw` (the step's `agent:` already taken, as `agent`,
    /// and resolved, as `def`).
    pub(super) fn take(
        agent: At<String>,
        def: Arc<Agent>,
        prompt: Prompt,
        escalate_to: Option<At<EscalateTo>>,
        raw: &mut RawStep,
    ) -> Self {
        Self {
            agent,
            def,
            prompt,
            escalate_to,
            tools: raw.tools.take(),
            verdicts: raw.verdicts.take(),
            budget: raw.budget.take(),
            commit: raw.commit.take(),
            output_schema: raw.output_schema.take(),
            min_confidence: raw.min_confidence.take(),
            verdict_from_text: raw.verdict_from_text.take(),
            max_turns: raw.max_turns.take(),
            dir: raw.dir.take(),
            context_paths: raw.context_paths.take(),
            max_context_bytes: raw.max_context_bytes.take(),
        }
    }
}

impl Prompt {
    /// Takes `prompt:`, `messages:` and `prompt_file: { artifact, path }` out of `raw`
    /// (the path form was read into `prompt:` by [`super::resolve`]): the one given, or
    /// the keys given together, with the first of them (loading fails on the error).
    pub(super) fn take(raw: &mut RawStep) -> (Self, Option<Vec<&'static str>>) {
        use super::step_keys::PromptFile;
        let file = raw.prompt_file.take().and_then(|f| match f.value {
            PromptFile::Artifact(a) => Some(a),
            // Read by loading before typing; a path left here was reported there.
            PromptFile::Path(_) => None,
        });
        let given: Vec<&'static str> = [
            ("prompt", raw.prompt.is_some()),
            ("messages", raw.messages.is_some()),
            ("prompt_file", file.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.then_some(k))
        .collect();
        let prompt = match (raw.prompt.take(), raw.messages.take(), file) {
            (Some(text), ..) => Self::Text(text),
            (None, Some(messages), _) => Self::Messages(messages),
            (None, None, Some(file)) => Self::File(file),
            (None, None, None) => Self::default(),
        };
        (prompt, (given.len() > 1).then_some(given))
    }
}

impl TaskKeys {
    /// Takes the task keys out of `raw` (`fix:` already taken and resolved, as `fix`).
    pub(super) fn take(fix: Option<At<Fixer>>, raw: &mut RawStep) -> Self {
        Self {
            fix,
            input_mapping: raw.input_mapping.take(),
            output_mapping: raw.output_mapping.take(),
        }
    }
}

impl Typer<'_> {
    /// The agent step whose `agent:` is `a`, its keys taken out of `raw`.
    pub(super) fn agent_call(&mut self, a: At<String>, raw: &mut RawStep) -> AgentCall {
        let def = self.agent(&a, |known| super::check::unknown_agent(&a.value, known));
        let (prompt, clash) = Prompt::take(raw);
        if let Some(keys) = clash {
            let keys: Vec<String> = keys.iter().map(|k| format!("`{k}:`")).collect();
            self.push(
                a.pos,
                format!(
                    "an agent step takes one of {}, not several",
                    keys.join(", ")
                ),
                "keep one of them: the prompt is one text, several messages, or a file".to_owned(),
            );
        }
        let escalate_to = raw.escalate_to.take().map(|t| self.escalate_to(t));
        AgentCall::take(a, def, prompt, escalate_to, raw)
    }

    /// The definition `name` names. An unknown name is reported (`message` and `hint`
    /// say what names it) and typed as a bare stand-in so that the checks after typing
    /// report the rest of the file; loading fails on the report.
    pub(super) fn agent(
        &mut self,
        name: &At<String>,
        said: impl FnOnce(&[String]) -> (String, String),
    ) -> Arc<Agent> {
        if let Some(def) = self.agents.get(&name.value) {
            return def.clone();
        }
        let (message, hint) = said(&self.known);
        self.out.push(Diagnostic::new(
            self.file,
            name.pos,
            Problem::UnknownAgent,
            message,
            hint,
        ));
        Arc::new(Agent {
            name: name.clone(),
            ..Agent::default()
        })
    }

    /// `escalate_to:` resolved: `human`, or an agent of the file.
    pub(super) fn escalate_to(&mut self, to: At<String>) -> At<EscalateTo> {
        use super::controls::HUMAN;
        let value = if to.value == HUMAN {
            EscalateTo::Human
        } else {
            EscalateTo::Agent(self.agent(&to, |_| {
                (
                    format!("`escalate_to: {}` names no agent", to.value),
                    format!("write `escalate_to: {HUMAN}` or the name of an agent under `agents:`"),
                )
            }))
        };
        At { value, pos: to.pos }
    }

    /// `fix:` of the task `task` resolved to its agent.
    pub(super) fn fixer(&mut self, fix: At<super::step_keys::Fix>, task: &str) -> At<Fixer> {
        let spec = fix.value.spec();
        let def = self.agent(
            &At {
                value: spec.agent.value.clone(),
                pos: fix.pos,
            },
            |_| {
                (
                    format!(
                        "`fix:` of step `{task}` names unknown agent `{}`",
                        spec.agent.value
                    ),
                    "define the fixer under `agents:`, or fix the name".to_owned(),
                )
            },
        );
        At {
            value: Fixer { spec, def },
            pos: fix.pos,
        }
    }
}
