//! [`AgentStep`]: everything one agent step needs to run, gathered from the pipeline's
//! agent definition and step, with the executor's run-time facts (the step directory, the
//! job's budget) added.
//!
//! Keeping this a plain struct means the runner never looks at YAML types, and a test or a
//! library user can build a step without a pipeline file.
//!
//! [`AgentStep::build`] is the one place a pipeline's agent step is turned into this value:
//! the executor builds it once per step, keys the step on [`AgentStep::key_view`] and
//! hands the same value to the agent runner, so what runs and what is keyed agree.

use std::path::PathBuf;

use serde_json::{Value, json};
use treadle_session::mcp::{McpServerConfig, McpTransport};

use crate::pipeline::model::ModelError;
use crate::pipeline::{ResolvedModel, mcp};
use crate::tools::Fence;

use super::budget::{BudgetScope, TokenBudget};
use super::controls::StepControls;
use super::cost::{ModelPrice, Prices, find_price};
use super::custom_tool::CustomSpec;

/// One agent step, ready to run.
#[derive(Debug, Clone)]
pub struct AgentStep {
    /// The step's display name (for messages).
    pub name: String,
    /// The model and where it is served.
    pub model: ResolvedModel,
    /// The agent's `fallback:` sources, in order: each continues the conversation when
    /// the one before fails with an outage.
    pub fallbacks: Vec<ResolvedModel>,
    /// The system prompt.
    pub system: Option<String>,
    /// The tools granted, after the step's narrowing; the verdict tool is added on top.
    pub tools: Vec<String>,
    /// The instruction the turn answers.
    pub prompt: String,
    /// The verdicts the agent must choose from; empty when the step has no `verdicts:`.
    pub verdicts: Vec<String>,
    /// `verdict_from_text: true`: a final answer whose whole text is one of `verdicts`
    /// counts as that verdict when the verdict tool was not called.
    pub verdict_from_text: bool,
    /// The most model calls the turn may make: [`DEFAULT_MAX_TURNS`] when `None`, no limit
    /// when `Some(0)` (see [`AgentStep::model_call_limit`]).
    pub max_turns: Option<u32>,
    /// Token limits the step runs under.
    pub budgets: Vec<TokenBudget>,
    /// The pipeline's prices; [`AgentStep::price`] picks the model's.
    pub prices: Prices,
    /// The step directory the tools are confined to.
    pub dir: PathBuf,
    /// Extra environment for `run_shell` (the step's `env:`).
    pub env: Vec<(String, String)>,
    /// Variables `run_shell` inherits besides the allow-list (the step's `pass_env:`).
    pub pass_env: Vec<String>,
    /// Whether `run_shell` is confined to `dir` (the step's `confined:`, default true).
    pub confined: bool,
    /// What `run_shell` may connect to (the step's `network:`, else its agent's, else
    /// `defaults:`'s; `None`: the default for `confined`).
    pub network: Option<crate::confine::grant::Network>,
    /// The variables holding any secret of the pipeline (`crate::pipeline::secrets`): none
    /// reaches `run_shell`, and their values are scrubbed from what the session, its tools
    /// and a tape see. Names only: the values are read where they are used.
    pub secret_vars: Vec<String>,
    /// Sampling temperature; the endpoint's default when `None`.
    pub temperature: Option<f32>,
    /// The other dials sent with every model request (`top_p`, `max_tokens`,
    /// `reasoning_effort`).
    pub dials: Dials,
    /// Longest silence from the model endpoint; the session's default when `None`.
    pub model_idle: Option<std::time::Duration>,
    /// Most bytes of one model response; the session's default when `None`.
    pub model_response: Option<u64>,
    /// Whether a forced tool choice is sent as the string `"required"` rather than naming
    /// the tool (`source.string_tool_choice:`, see [`AgentStep::forced_choice`]).
    pub string_tool_choice: bool,
    /// `attempts:`: the most requests one model call may make, the client's own retries
    /// included (so `1` is one request); the session's retry policy when `None`.
    pub attempts: Option<u32>,
    /// Longest one model call may take in all; the session's default when `None`.
    pub model_call: Option<std::time::Duration>,
    /// The agent's MCP servers; `tools` names which of their tools the step gets.
    pub mcp: Vec<McpServerConfig>,
    /// How the conversation is kept bounded; the session's defaults where `None`.
    pub conversation: Conversation,
    /// Permissions, typed output, confidence floor, dollar budgets, who is asked.
    pub controls: StepControls,
    /// Who answers the step's `ask_human` questions; `None`: nobody can (a question is
    /// answered that nobody can answer).
    pub answerer: Option<Answerer>,
    /// The pipeline's `on_unfinished_effect:` policy for the step's session.
    pub unfinished_effects: treadle_session::EffectPolicy,
    /// Custom tools, `web_fetch`'s fence and sub-agents of the grant.
    pub granted: Granted,
    /// For a sub-agent's call: the session and tool that asked (journaled with its
    /// session's start).
    pub parent: Option<treadle_event::ParentLink>,
    /// What a CLI-backed agent (`@claude/MODEL`, `@codex/MODEL`) needs besides.
    pub cli: CliStep,
    /// The step's `assert: files:`: a model that ends its turn without one of them is
    /// told which it owes and goes on (see `required.rs`).
    pub owed_files: Vec<String>,
    /// What the model finds already read when it starts, set when the step runs: the
    /// decisions of `context: { from }` and the `context_paths:` files, as tool calls and
    /// their results after the prompt.
    pub handed: Vec<super::context_files::Handed>,
}

/// Answers an agent step's `ask_human` questions: the pipeline parks each one for a
/// person like an approval (see `crate::run::approval::question`) and gives back the answer.
#[derive(Clone)]
pub struct Answerer {
    /// Asks one question and waits for its answer.
    pub ask: std::sync::Arc<
        dyn Fn(
                treadle_session::HumanQuestion,
            ) -> futures::future::BoxFuture<'static, treadle_session::GateAnswer>
            + Send
            + Sync,
    >,
    /// How long a question may wait (the step's `timeout:`); the session's gates wait as long.
    pub deadline: Option<std::time::Duration>,
}

impl Answerer {
    /// The same answerer for the questions of sub-agent `name`, which the person sees
    /// marked as the sub-agent's.
    pub fn on_behalf_of(&self, name: &str) -> Self {
        let (ask, who) = (self.ask.clone(), format!("[sub-agent {name}] "));
        Self {
            ask: std::sync::Arc::new(move |mut question: treadle_session::HumanQuestion| {
                question.question = format!("{who}{}", question.question);
                ask(question)
            }),
            deadline: self.deadline,
        }
    }
}

impl std::fmt::Debug for Answerer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Answerer(deadline {:?})", self.deadline)
    }
}

/// The agent's model dials besides its temperature; each is the endpoint's default when
/// `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dials {
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// The most tokens one response may have.
    pub max_tokens: Option<u32>,
    /// `low`, `medium` or `high`.
    pub reasoning_effort: Option<String>,
}

/// How an agent step's conversation is kept within its model's context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conversation {
    /// The model's context window in tokens (compaction at 80% of it).
    pub context_window: Option<u64>,
    /// Compaction after this many estimated tokens (wins over the window); `0`: never.
    pub compact_after_tokens: Option<u64>,
    /// The most bytes of one tool result put inline; `None` or `0`: no cap.
    pub max_context_bytes: Option<u64>,
}

/// The most model calls an agent step makes when its agent sets no `max_turns`: enough
/// for a step's work (read, change, check, answer), far below a long session's limit, so a
/// model that loses its way fails the step in minutes rather than at its timeout.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// Why a pipeline's agent step could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The agent's model cannot be resolved.
    #[error("{0} ({hint})", hint = .0.hint())]
    Model(#[from] ModelError),
    /// The step uses something treadle cannot run yet.
    #[error("{0}")]
    Unsupported(String),
}

impl AgentStep {
    /// The step, confined to `dir`.
    #[must_use]
    pub fn in_dir(mut self, dir: PathBuf) -> Self {
        self.dir = dir;
        self
    }

    /// What of the step its cache key hashes: the model and its endpoint, the system
    /// prompt, the granted tools with their schemas, the prompt and the MCP servers.
    /// Left out: what bounds how it runs (budgets, `max_turns`, the price) and where (the
    /// directory).
    pub fn key_view(&self) -> Value {
        let mut view = json!({
            "model": {
                "provider": self.model.provider,
                "model": self.model.model,
                "endpoint": self.model.base_url,
            },
            "system": self.system,
            "tools": tool_schemas(
                &self.tools.iter().filter(|t| !self.granted.owns(t)).cloned().collect::<Vec<_>>()
            ),
            "prompt": self.prompt,
        });
        // Only when there are servers, so that the keys of agents without any stay as they were.
        if !self.mcp.is_empty()
            && let Value::Object(map) = &mut view
        {
            let servers = self.mcp.iter().map(server_view).collect();
            map.insert("mcp_servers".to_owned(), Value::Array(servers));
        }
        if let (Some(controls), Value::Object(map)) = (self.controls.key_view(), &mut view) {
            map.insert("controls".to_owned(), controls);
        }
        if let (Some(granted), Value::Object(map)) = (self.granted.key_view(), &mut view) {
            map.insert("granted".to_owned(), granted);
        }
        // Only when opted in, so that other keys stay as they were.
        if let (true, Value::Object(map)) = (self.cli.settings_project, &mut view) {
            map.insert("settings".to_owned(), Value::String("project".to_owned()));
        }
        if let (Some(hooks), Value::Object(map)) = (self.controls.hooks.key_view(), &mut view) {
            map.insert("hooks".to_owned(), hooks);
        }
        // It decides which verdict a text answer gives, so a step that takes one and a
        // step that does not answer differently (only when set, so other keys stay).
        if let (true, Value::Object(map)) = (self.verdict_from_text, &mut view) {
            map.insert("verdict_from_text".to_owned(), Value::Bool(true));
        }
        view
    }

    /// The `tool_choice` that forces a call of `tool`: the tool by name, or (with
    /// `string_tool_choice`) the string form, which only forces *some* tool call.
    pub fn forced_choice(&self, tool: &str) -> treadle_session::inference::ToolChoice {
        use treadle_session::inference::ToolChoice;
        if self.string_tool_choice {
            ToolChoice::Required
        } else {
            ToolChoice::Named(tool.to_owned())
        }
    }

    /// The most model calls the step's turn may make: its `max_turns`, else
    /// [`DEFAULT_MAX_TURNS`]; `max_turns: 0` means no limit.
    pub fn model_call_limit(&self) -> u32 {
        match self.max_turns {
            None => DEFAULT_MAX_TURNS,
            Some(0) => u32::MAX,
            Some(limit) => limit,
        }
    }

    /// Adds the job's budget: `limit` tokens for every agent step of the job, of which
    /// earlier steps spent `spent`.
    #[must_use]
    pub fn with_job_budget(mut self, limit: u64, spent: u64) -> Self {
        self.budgets.push(TokenBudget {
            scope: BudgetScope::Job,
            limit,
            spent_before: spent,
        });
        self
    }

    /// Keeps the pipeline's prices, to price the step once the model answered.
    #[must_use]
    pub fn with_prices(mut self, prices: &Prices) -> Self {
        self.prices = prices.clone();
        self
    }

    /// The price of the model that answered: by the name the endpoint reported serving
    /// (`served`; a router or an alias may serve another model than the one asked for),
    /// else the name written in the pipeline (`provider/model`), else the name sent.
    pub fn price(&self, served: &str) -> Option<ModelPrice> {
        let qualified = format!("{}/{}", self.model.provider, self.model.model);
        find_price(&self.prices, &[served, &qualified, &self.model.model]).copied()
    }
}

/// What a step's grant holds besides built-in and MCP tool names.
#[derive(Debug, Clone, Default)]
pub struct Granted {
    /// The custom tools granted (after the step's narrowing).
    pub custom: Vec<CustomSpec>,
    /// The hosts `web_fetch` may reach (empty: any).
    pub fence: Fence,
    /// The sub-agents granted (after the step's narrowing).
    pub delegates: Vec<Delegate>,
    /// The MCP tools granted with `max_calls:` (`SERVER__TOOL`, its budget).
    pub mcp_limits: Vec<(String, u32)>,
}

/// A sub-agent the step's model may call as a tool.
#[derive(Debug, Clone)]
pub struct Delegate {
    /// The tool's name: the sub-agent's name.
    pub name: String,
    /// What the parent model is told (the grant's `description:`, else the agent's).
    pub description: String,
    /// The sub-agent's own step: model, persona, tools, limits; its prompt is the request.
    pub step: Box<AgentStep>,
    /// The share (percent) of the parent's remaining token budget each call may spend.
    pub percent: u32,
}

/// What a CLI-backed step needs besides what every agent step has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliStep {
    /// `settings: project`: the repository's own CLI settings load.
    pub settings_project: bool,
    /// The step's `attempts:` (1 when unset).
    pub attempts: u32,
}

fn server_view(server: &McpServerConfig) -> Value {
    let (command, args, env, endpoint) = match &server.transport {
        McpTransport::Stdio {
            command, args, env, ..
        } => {
            let env: serde_json::Map<String, Value> = env
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            (Some(command.as_str()), args.clone(), env, None)
        }
        McpTransport::Http { url, .. } => {
            (None, Vec::new(), serde_json::Map::new(), Some(url.as_str()))
        }
    };
    json!({ "name": server.name, "command": command, "args": args, "env": env, "endpoint": endpoint })
}

// The schemas are part of the key: a tool whose arguments change is a different tool to
// the model even under the same name. MCP tools are keyed by name (and their server's
// config): their schemas are only known once the server runs.
fn tool_schemas(tools: &[String]) -> Value {
    let (remote, builtin): (Vec<&String>, Vec<&String>) =
        tools.iter().partition(|t| mcp::server_of(t).is_some());
    let dir = std::env::temp_dir();
    let schemas = crate::tools::Workspace::new(&dir)
        .ok()
        .and_then(|ws| crate::tools::grant(&builtin, &ws).ok());
    match schemas {
        Some(list) => Value::Array(
            list.iter()
                .map(|t| json!({ "name": t.name(), "description": t.description(), "parameters": t.parameters() }))
                .chain(remote.into_iter().map(|name| json!(name)))
                .collect(),
        ),
        // An unknown tool fails the step when it runs; its name alone keys it until then.
        None => json!(tools),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::pipeline::flow_keys::Verdict;

    use std::sync::Arc;

    use super::*;
    use crate::pipeline::agent_call::Prompt;
    use crate::pipeline::tool_grant::ToolGrant;
    use crate::pipeline::{Agent, AgentCall, At, Budget, Pos, Step};
    use crate::tools::DEFAULT_GRANT;

    fn model() -> ResolvedModel {
        ResolvedModel {
            provider: "local".into(),
            model: "tiny".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key_env: None,
            pos: Pos::default(),
            key_pos: Pos::default(),
        }
    }

    fn agent(tools: Option<&[&str]>, budget: Option<u64>) -> Agent {
        Agent {
            name: At::new("reviewer".into()),
            source: Default::default(),
            system: Some("Be terse.".into()),
            tools: tools.map(|t| {
                t.iter()
                    .map(|s| At::new(ToolGrant::Name((*s).to_owned())))
                    .collect()
            }),
            max_turns: Some(7),
            budget: budget.map(|tokens| Budget {
                tokens: Some(tokens),
                ..Budget::default()
            }),
            ..Agent::default()
        }
    }

    #[test]
    fn gathers_prompt_tools_verdicts_and_budget() {
        let mut verdict = BTreeMap::new();
        verdict.insert("approve".to_owned(), At::new("publish".to_owned()));
        let mut reject = BTreeMap::new();
        reject.insert("reject".to_owned(), At::new("escalate".to_owned()));
        let call = AgentCall {
            prompt: Prompt::Messages(vec!["Review.".into(), "Be brief.".into()]),
            tools: Some(vec![
                At::new("read_file".into()),
                At::new("run_shell".into()),
            ]),
            verdicts: Some(vec![
                At::new(Verdict::Route(verdict)),
                At::new(Verdict::Route(reject)),
            ]),
            budget: Some(Budget {
                tokens: Some(500),
                ..Budget::default()
            }),
            ..AgentCall::new(Arc::new(agent(
                Some(&["read_file", "write_file"]),
                Some(800),
            )))
        };
        let step = Step::agent(call.clone());
        let spec = AgentStep::from_pipeline(&step, &call, model(), PathBuf::from("/tmp/step"))
            .with_job_budget(10_000, 9_000);
        assert_eq!(spec.name, "reviewer");
        assert_eq!(spec.prompt, "Review.\n\nBe brief.");
        // run_shell was not granted to the agent, so narrowing cannot add it.
        assert_eq!(spec.tools, ["read_file"]);
        assert_eq!(spec.verdicts, ["approve", "reject"]);
        assert_eq!(spec.max_turns, Some(7));
        assert_eq!(
            spec.budgets,
            [
                TokenBudget {
                    scope: BudgetScope::Step,
                    limit: 500,
                    spent_before: 0
                },
                TokenBudget {
                    scope: BudgetScope::Job,
                    limit: 10_000,
                    spent_before: 9_000
                }
            ]
        );
    }

    #[test]
    fn the_default_grant_is_read_only() {
        let call = AgentCall {
            prompt: Prompt::Text("x".into()),
            ..AgentCall::new(Arc::new(agent(None, None)))
        };
        let step = Step::agent(call.clone());
        let spec = AgentStep::from_pipeline(&step, &call, model(), PathBuf::new());
        assert_eq!(spec.tools, DEFAULT_GRANT);
        assert!(spec.budgets.is_empty());
        assert!(spec.verdicts.is_empty());
    }

    #[test]
    fn prices_are_found_by_model_name() {
        let call = AgentCall::new(Arc::new(agent(None, None)));
        let step = Step::agent(call.clone());
        let mut prices = Prices::new();
        prices.insert(
            "tiny".into(),
            ModelPrice {
                prompt: 1.0,
                completion: 2.0,
                cached: None,
            },
        );
        let spec =
            AgentStep::from_pipeline(&step, &call, model(), PathBuf::new()).with_prices(&prices);
        assert_eq!(spec.price("other").map(|p| p.completion), Some(2.0));
        prices.insert(
            "served".into(),
            ModelPrice {
                prompt: 1.0,
                completion: 5.0,
                cached: None,
            },
        );
        let spec = spec.with_prices(&prices);
        assert_eq!(spec.price("served").map(|p| p.completion), Some(5.0));
    }

    #[test]
    fn built_once_from_the_file_and_keyed_on_what_runs() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("treadle.yml");
        std::fs::write(
            &file,
            "agents:\n  - name: reviewer\n    source: { model: local/tiny }\n    tools: [read_file, write_file]\n\
             prices:\n  local/tiny: { prompt: 1.0, completion: 2.0 }\n\
             plan:\n  - agent: reviewer\n    prompt: Review.\n    tools: [read_file]\n",
        )?;
        let scope = crate::pipeline::CheckScope {
            job: None,
            env: &|_| None,
            machine: false,
        };
        let loaded = crate::pipeline::load(&file, &scope)?;
        let step = &loaded.pipeline.jobs[0].plan[0];
        let crate::pipeline::StepKind::Agent(call) = &step.kind else {
            return Err("the step is an agent step".into());
        };
        let built = AgentStep::build(&loaded, step, call)?;
        assert_eq!(built.tools, ["read_file"]);
        assert_eq!(built.price("tiny").map(|p| p.completion), Some(2.0));
        let view = built.key_view();
        // The key sees exactly the prompt and the tools the runner gets.
        assert_eq!(view["prompt"], built.prompt.as_str());
        let keyed: Vec<&str> = view["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(keyed, built.tools);
        // The directory is not part of the key.
        assert_eq!(built.clone().in_dir("/tmp/x".into()).key_view(), view);
        // The step's agent is its definition, resolved when the file was loaded.
        assert_eq!(call.def.name.value, "reviewer");
        Ok(())
    }
}
