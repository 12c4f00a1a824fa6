//! Reading a pipeline's agent step into an [`AgentStep`]: its agent (resolved when the
//! file was loaded: [`AgentCall::def`]), its model (resolved here against the process
//! environment, which holds the key variables and may change between runs), its grant,
//! its price and its controls. The one place a step's fields are read for an agent step
//! (see `super::spec`).

use std::path::PathBuf;

use crate::pipeline::model::{self, process_env};
use crate::pipeline::{Agent, AgentCall, Loaded, ResolvedModel, Step, mcp};
use crate::tools::DEFAULT_GRANT;

use super::budget::{BudgetScope, TokenBudget};
use super::controls::StepControls;
use super::cost::Prices;
use super::spec::{AgentStep, BuildError, CliStep, Conversation, Dials, Granted};

impl AgentStep {
    /// Builds the agent step `step` runs (`call` is its kind's payload), from the loaded
    /// pipeline: its agent's model (resolved against the process environment) and its
    /// price. The directory is the executor's to add with [`AgentStep::in_dir`] once it is
    /// made.
    pub fn build(loaded: &Loaded, step: &Step, call: &AgentCall) -> Result<Self, BuildError> {
        Self::build_nested(loaded, step, call, 0)
    }

    /// [`AgentStep::build`] for a step `depth` delegations down (a sub-agent's own step).
    pub(crate) fn build_nested(
        loaded: &Loaded,
        step: &Step,
        call: &AgentCall,
        depth: usize,
    ) -> Result<Self, BuildError> {
        let agent: &Agent = &call.def;
        let model = model::resolve(&agent.source, agent.name.pos, &process_env)?;
        if let Some(why) = super::refuse::unsupported(agent, step, &model) {
            return Err(BuildError::Unsupported(why));
        }
        let controls = super::controls::from_pipeline(loaded, call)?;
        let mut fallbacks = Vec::new();
        for fb in &agent.fallback {
            let m = model::resolve(&fb.source, fb.pos, &process_env)?;
            // A CLI-backed source has its own resume, outside this cascade: it ends here.
            if m.provider == model::CLI_PROVIDER {
                break;
            }
            fallbacks.push(m);
        }
        let mut built = Self::from_pipeline(step, call, model, PathBuf::new())
            .with_prices(&loaded.pipeline.prices);
        built.controls = controls;
        built.fallbacks = fallbacks;
        built.unfinished_effects = loaded.pipeline.on_unfinished_effect.unwrap_or_default();
        if built.network.is_none() {
            built.network = loaded
                .pipeline
                .defaults
                .as_ref()
                .and_then(|d| d.network.as_ref())
                .map(|n| n.value.clone());
        }
        built.granted = Granted::read(loaded, agent, &built.tools, depth)?;
        built.secret_vars = crate::pipeline::secrets::key_vars(&loaded.pipeline)
            .into_iter()
            .collect();
        Ok(built)
    }

    /// Builds the step from its pipeline definition.
    ///
    /// * tools: the step's `tools:` where given (the checks already refused any that widen
    ///   the agent's grant; they are filtered here too), else the agent's `tools:`, else the
    ///   read-only [`DEFAULT_GRANT`]; MCP tools stay names (and `{server}__*` patterns)
    ///   until the step starts their servers;
    /// * prompt: `prompt:`, or each of `messages:` separated by blank lines (a
    ///   `prompt_file:` inside an input is read when the step runs);
    /// * verdicts: the keys of `verdicts:`, in order;
    /// * budget: the smaller of the agent's and the step's `budget: { tokens }` (an
    ///   `across:` step's is its block's, not each cell's). A job budget is the executor's
    ///   to add with [`AgentStep::with_job_budget`].
    pub fn from_pipeline(
        step: &Step,
        call: &AgentCall,
        model: ResolvedModel,
        dir: PathBuf,
    ) -> Self {
        let agent: &Agent = &call.def;
        let granted: Vec<String> = match agent.grant() {
            Some(tools) => tools.into_iter().map(|t| t.value).collect(),
            None => DEFAULT_GRANT.iter().map(|t| (*t).to_owned()).collect(),
        };
        let tools = match &call.tools {
            Some(narrowed) => narrowed
                .iter()
                .map(|t| t.value.clone())
                .filter(|t| mcp::covers(&granted, t))
                .collect(),
            None => granted,
        };

        let verdicts = step.verdict_choices();

        // On an `across:` step, `budget:` is the block's, shared by its cells and checked
        // before each starts (`crate::run::admit`); a started cell is never cut off by it.
        let own = call.budget.as_ref().filter(|_| step.across.is_none());
        let limit = [agent.budget.as_ref(), own]
            .into_iter()
            .filter_map(|b| b.and_then(|b| b.tokens))
            .min();
        let budgets = limit
            .map(|limit| TokenBudget {
                scope: BudgetScope::Step,
                limit,
                spent_before: 0,
            })
            .into_iter()
            .collect();

        let name = step.name.as_ref().unwrap_or(&call.agent).value.clone();

        let string_tool_choice = agent.source.string_tool_choice.as_ref().map_or_else(
            || matches!(model.provider.as_str(), "lmstudio" | "ollama"),
            |s| s.value,
        );
        let secret_vars = model.api_key_env.iter().cloned().collect();
        let conversation = Conversation {
            context_window: crate::pipeline::conversation::context_window(agent, &model.provider),
            compact_after_tokens: agent.compact_after_tokens,
            max_context_bytes: call
                .max_context_bytes
                .or(agent.max_context_bytes)
                .map(|s| s.0),
        };
        Self {
            name,
            model,
            fallbacks: Vec::new(),
            system: agent.system.clone(),
            tools,
            prompt: call.prompt.joined(),
            verdicts,
            verdict_from_text: call.verdict_from_text.as_ref().is_some_and(|v| v.value),
            max_turns: call.max_turns.as_ref().map(|m| m.value).or(agent.max_turns),
            budgets,
            prices: Prices::new(),
            dir,
            env: step
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            // A step naming its own variables replaces the agent's list.
            pass_env: if step.pass_env.is_empty() {
                agent.env.iter().map(|v| v.value.clone()).collect()
            } else {
                step.pass_env.clone()
            },
            confined: step.confined.unwrap_or(true),
            network: step
                .network
                .as_ref()
                .or(agent.network.as_ref())
                .map(|n| n.value.clone()),
            answerer: None,
            unfinished_effects: Default::default(),
            // The model's own key at least; [`AgentStep::build`] adds the pipeline's.
            secret_vars,
            temperature: agent.temperature,
            dials: Dials {
                top_p: agent.top_p.as_ref().map(|p| p.value),
                max_tokens: agent.max_tokens.as_ref().map(|m| m.value),
                reasoning_effort: agent.reasoning_effort.as_ref().map(|r| r.value.clone()),
            },
            model_idle: agent
                .limits
                .as_ref()
                .and_then(|l| l.model_idle.map(|d| d.0)),
            string_tool_choice,
            // The step's `attempts:` (its agent's filled in at load).
            attempts: step.attempts.as_ref().map(|a| a.value.max(1)),
            model_response: agent
                .limits
                .as_ref()
                .and_then(|l| l.model_response.map(|s| s.0)),
            model_call: agent
                .limits
                .as_ref()
                .and_then(|l| l.model_call.map(|d| d.0)),
            mcp: mcp::configs(agent),
            conversation,
            controls: StepControls::default(),
            granted: Granted::default(),
            parent: None,
            cli: CliStep {
                settings_project: agent
                    .settings
                    .as_ref()
                    .is_some_and(|s| s.value == "project"),
                attempts: step
                    .attempts
                    .as_ref()
                    .or(agent.attempts.as_ref())
                    .map_or(1, |a| a.value),
            },
            owed_files: step
                .assert
                .as_ref()
                .map(|a| a.value.files.clone())
                .unwrap_or_default(),
            handed: Vec::new(),
        }
    }
}
