//! What a workflow's calls build: each is a typed [`Step`], the value loading makes of
//! the same step written in YAML, and what a step gives back once it ran.

use std::time::Duration;

use super::FlowError;
use crate::pipeline::container::Env;
use crate::pipeline::controls::OutputSchema;
use crate::pipeline::flow_keys::Verdict;
use crate::pipeline::{At, DurationSpec, Loaded, RunSpec, Step, StepKind, TaskKeys};

/// Names a workflow's builder was given, as the pipeline's typed step holds them (with no
/// place in a file).
pub(super) fn names<I: IntoIterator<Item = S>, S: Into<String>>(list: I) -> Vec<At<String>> {
    list.into_iter().map(|s| At::new(s.into())).collect()
}

/// A shell step (a `task:` with `run:`): the command, the artifacts it reads and makes.
#[derive(Debug, Clone)]
pub struct Shell {
    step: Step,
}

impl Shell {
    /// Runs `command` with `sh -c` in the step directory (confined to it, as a task is).
    pub fn new(command: impl Into<String>) -> Self {
        let kind = StepKind::Task {
            name: At::new(String::new()),
            run: At::new(RunSpec::Shell(command.into())),
            keys: TaskKeys::default(),
        };
        Self {
            step: Step::of_kind(kind),
        }
    }

    /// Artifacts it reads, each a read-only directory of that name (`inputs:`).
    pub fn inputs<S: Into<String>>(mut self, names_: impl IntoIterator<Item = S>) -> Self {
        self.step.inputs = names(names_);
        self
    }

    /// Artifacts it makes, each an empty directory collected after it (`outputs:`).
    pub fn outputs<S: Into<String>>(mut self, names_: impl IntoIterator<Item = S>) -> Self {
        self.step.outputs = names(names_);
        self
    }

    /// Sets variable `name` to `value` in its environment (`env:`): the way to hand a
    /// value to the command without quoting it into the command line.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Env::Map(map) = &mut self.step.env {
            map.insert(name.into(), value.into());
        }
        self
    }

    /// Not confined to its step directory (`confined: false`: a deploy, a counter).
    pub fn unconfined(mut self) -> Self {
        self.step.confined = Some(false);
        self
    }

    /// Never replayed from the cache (`volatile: true`); a resume still keeps it.
    pub fn volatile(mut self) -> Self {
        self.step.volatile = true;
        self
    }

    /// Killed after this long (`timeout:`).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.step.timeout = Some(At::new(DurationSpec(limit)));
        self
    }

    /// The typed step, named `name` (`task: NAME`).
    pub fn into_step(mut self, name: &str) -> Step {
        if let StepKind::Task { name: n, .. } = &mut self.step.kind {
            n.value = name.to_owned();
        }
        self.step
    }
}

/// An agent step: the agent (one of the workflow's [`super::Agents`]) and its prompt,
/// with the keys a YAML agent step takes (the step's [`crate::pipeline::AgentCall`] and
/// the keys every step has).
#[derive(Debug, Clone)]
pub struct AgentTask {
    /// Its agent a bare definition of that name until the flow resolves it against the
    /// workflow's agents ([`AgentTask::into_step`]), as loading resolves a YAML step's.
    call: crate::pipeline::AgentCall,
    /// `escalate_to:` by name, resolved with the agent.
    escalate_to: Option<String>,
    step: Step,
}

impl AgentTask {
    /// Asks agent `agent` to do `prompt`.
    pub fn new(agent: impl Into<String>, prompt: impl Into<String>) -> Self {
        let named = crate::pipeline::Agent {
            name: At::new(agent.into()),
            ..crate::pipeline::Agent::default()
        };
        let mut call = crate::pipeline::AgentCall::new(std::sync::Arc::new(named));
        call.prompt = crate::pipeline::agent_call::Prompt::Text(prompt.into());
        // The step's kind is set from `call` when the step is made.
        let step = Step::of_kind(StepKind::Do(Vec::new()));
        Self {
            call,
            escalate_to: None,
            step,
        }
    }

    /// Artifacts it reads (`inputs:`).
    pub fn inputs<S: Into<String>>(mut self, names_: impl IntoIterator<Item = S>) -> Self {
        self.step.inputs = names(names_);
        self
    }

    /// Artifacts it makes (`outputs:`).
    pub fn outputs<S: Into<String>>(mut self, names_: impl IntoIterator<Item = S>) -> Self {
        self.step.outputs = names(names_);
        self
    }

    /// The choices it must pick one of (`verdicts:`, bare: the workflow's own code
    /// decides where each goes).
    pub fn verdicts<S: Into<String>>(mut self, choices: impl IntoIterator<Item = S>) -> Self {
        let entries = choices
            .into_iter()
            .map(|c| At::new(Verdict::Bare(c.into())))
            .collect();
        self.call.verdicts = Some(entries);
        self
    }

    /// Narrows the agent's tools for this step (`tools:`).
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.call.tools = Some(names(tools));
        self
    }

    /// Keeps what the agent changed in a git input as a commit with this message
    /// (`commit:`); without it the changes are wiped.
    pub fn commit(mut self, message: impl Into<String>) -> Self {
        self.call.commit = Some(message.into());
        self
    }

    /// Upper bound on its model requests (`max_turns:`).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.call.max_turns = Some(At::new(turns));
        self
    }

    /// Stopped after this long (`timeout:`).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.step.timeout = Some(At::new(DurationSpec(limit)));
        self
    }

    /// Its token and dollar ceiling (`budget:`): no model call is made past it.
    pub fn budget(mut self, budget: crate::pipeline::agent_def::Budget) -> Self {
        self.call.budget = Some(budget);
        self
    }

    /// Its answer as JSON checked against `schema`, written to `output/output.json`
    /// (`output_schema:`; `output` joins its outputs).
    pub(crate) fn output_schema(mut self, output: &str, schema: serde_json::Value) -> Self {
        if !self.step.outputs.iter().any(|o| o.value == output) {
            self.step.outputs.push(At::new(output.to_owned()));
        }
        self.call.output_schema = Some(At::new(OutputSchema {
            output: output.to_owned(),
            schema,
        }));
        self
    }

    /// With `verdicts`, the least confidence (0 to 1) its verdict needs
    /// (`min_confidence:`); below it the step asks a person (or [`Self::escalate_to`]).
    pub fn min_confidence(mut self, floor: f64) -> Self {
        self.call.min_confidence = Some(At::new(floor));
        self
    }

    /// Where a verdict below `min_confidence` goes (`escalate_to:`): `human` (the
    /// default) or a stronger agent, which decides again.
    pub fn escalate_to(mut self, to: impl Into<String>) -> Self {
        self.escalate_to = Some(to.into());
        self
    }

    /// Whether it has `verdicts` and a `min_confidence` (what a decision needs).
    pub(crate) fn decides(&self) -> bool {
        self.call.verdicts.as_ref().is_some_and(|v| !v.is_empty())
            && self.call.min_confidence.is_some()
    }

    /// The typed step, named `name` (`name:`), its agent (and `escalate_to`) resolved
    /// against the workflow's agents in `loaded`: an agent it does not define is refused
    /// here, before the step runs, as loading refuses it in a YAML file.
    pub fn into_step(self, name: &str, loaded: &Loaded) -> Result<Step, FlowError> {
        use crate::pipeline::agent_call::EscalateTo;
        let Self {
            mut call,
            escalate_to,
            mut step,
        } = self;
        let resolve = |agent: &str| {
            loaded
                .agent(agent)
                .map(|def| std::sync::Arc::new(def.clone()))
                .ok_or_else(|| FlowError::Refused {
                    name: name.to_owned(),
                    reason: format!("unknown agent `{agent}`: add it to the workflow's agents"),
                })
        };
        call.def = resolve(&call.agent.value)?;
        // A YAML file granting an unknown sub-agent does not load; a workflow's agents
        // built in code are refused here, before any step of theirs runs.
        let unresolved = loaded.pipeline.agents.iter().find_map(|a| {
            a.unresolved_delegates()
                .next()
                .map(|g| (a.name.value.clone(), g.agent.clone()))
        });
        if let Some((parent, agent)) = unresolved {
            let unknown = crate::pipeline::delegation::Unknown { parent, agent };
            return Err(FlowError::Refused {
                name: name.to_owned(),
                reason: format!("{}: add it to the workflow's agents", unknown.said().0),
            });
        }
        call.escalate_to = match escalate_to.as_deref() {
            None => None,
            Some(crate::pipeline::controls::HUMAN) => Some(At::new(EscalateTo::Human)),
            Some(to) => Some(At::new(EscalateTo::Agent(resolve(to)?))),
        };
        step.kind = StepKind::Agent(Box::new(call));
        step.name = Some(At::new(name.to_owned()));
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use super::AgentTask;
    use crate::pipeline::agent_def::Budget;

    #[test]
    fn budget_is_the_agent_steps_budget_key() {
        let budget = Budget {
            tokens: Some(1200),
            dollars: Some(0.5),
            ..Budget::default()
        };
        let agents = crate::workflow::Agents::none().with(crate::pipeline::Agent {
            name: crate::pipeline::At::new("a".to_owned()),
            ..crate::pipeline::Agent::default()
        });
        let loaded = crate::pipeline::Loaded {
            file: agents.file.clone(),
            dir: ".".into(),
            pipeline: agents.pipeline,
            resources: crate::pipeline::Resources::default(),
        };
        let step = AgentTask::new("a", "p")
            .budget(budget)
            .into_step("s", &loaded);
        let step = step.unwrap_or_else(|e| panic!("{e}"));
        let unknown = AgentTask::new("b", "p").into_step("s", &loaded);
        assert!(
            matches!(&unknown, Err(super::FlowError::Refused { reason, .. }) if reason.contains("unknown agent `b`")),
            "{unknown:?}"
        );
        let crate::pipeline::StepKind::Agent(call) = &step.kind else {
            panic!("an agent task makes an agent step: {step:?}");
        };
        let b = call.budget.as_ref();
        assert_eq!(b.and_then(|b| b.tokens), Some(1200));
        assert_eq!(b.and_then(|b| b.dollars), Some(0.5));
    }

    #[test]
    fn a_sub_agent_grant_is_resolved_with_the_agents_and_an_unknown_one_refused() {
        use crate::pipeline::tool_grant::{AgentGrant, ToolGrant};
        use crate::pipeline::{Agent, At};
        let lead = Agent {
            name: At::new("lead".to_owned()),
            tools: Some(vec![At::new(ToolGrant::Agent(AgentGrant {
                agent: At::new("helper".to_owned()),
                description: None,
                strays: Vec::new(),
            }))]),
            ..Agent::default()
        };
        let loaded_of = |agents: crate::workflow::Agents| crate::pipeline::Loaded {
            file: agents.file.clone(),
            dir: ".".into(),
            pipeline: agents.pipeline,
            resources: crate::pipeline::Resources::default(),
        };
        let alone = loaded_of(crate::workflow::Agents::none().with(lead.clone()));
        let refused = AgentTask::new("lead", "p").into_step("s", &alone);
        assert!(
            matches!(&refused, Err(super::FlowError::Refused { reason, .. })
                if reason.contains("agent `lead` is granted unknown agent `helper`")),
            "{refused:?}"
        );
        // Given later, the helper is found: adding an agent resolves every grant again.
        let helper = Agent {
            name: At::new("helper".to_owned()),
            ..Agent::default()
        };
        let both = loaded_of(crate::workflow::Agents::none().with(lead).with(helper));
        let step = AgentTask::new("lead", "p").into_step("s", &both);
        let call = step.as_ref().ok().and_then(|s| match &s.kind {
            crate::pipeline::StepKind::Agent(call) => Some(call),
            _ => None,
        });
        let sub = call.map(|c| both.pipeline.agent_at(c.def.delegations[0].agent));
        assert_eq!(sub.map(|a| a.name.value.as_str()), Some("helper"));
    }

    #[test]
    fn agents_read_from_yaml_refuse_an_unknown_sub_agent_where_it_is_written() {
        let text = "agents:\n  - name: lead\n    tools:\n      - agent: helpr\n  - name: helper\n";
        let e = crate::workflow::Agents::from_yaml(text)
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.contains("workflow.yml:4:16") && e.contains("granted unknown agent `helpr`"),
            "{e}"
        );
    }
}
