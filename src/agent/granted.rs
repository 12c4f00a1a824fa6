//! The tools of an agent's grant that are more than a name: custom tools (a command),
//! `web_fetch`'s host fence, and sub-agents (another agent called as a tool). [`Granted`]
//! reads them from the pipeline when the step is built, and keys them: editing a custom
//! tool's command, a fence or a sub-agent (or its sub-agents) changes the step's key.

use std::sync::Arc;

use serde_json::{Value, json};
use treadle_session::Tool;

use super::custom_tool::{CustomSpec, CustomTool, Tally};
use super::delegate::{DelegateTool, Parent};
use super::required::Required;
use super::spec::{AgentStep, BuildError, Delegate, Granted};
use crate::pipeline::check_agent::MAX_DELEGATION_DEPTH;
use crate::pipeline::delegation::Delegation;
use crate::pipeline::tool_grant::{CustomGrant, ToolGrant};
use crate::pipeline::{Agent, AgentCall, Loaded, Step};
use crate::template::TemplateError;
use crate::tools::{Fence, Workspace};

/// The share of what is left of its budget an agent gives a sub-agent when neither it nor
/// `defaults:` says (`delegate_budget_percent:`).
pub const DEFAULT_DELEGATE_PERCENT: u32 = 10;

impl Granted {
    /// Reads the grant of `agent`, keeping only what `tools` (the step's tools after
    /// narrowing) names. Sub-agents are built whole, recursively, `depth` levels down.
    pub fn read(
        loaded: &Loaded,
        agent: &Agent,
        tools: &[String],
        depth: usize,
    ) -> Result<Self, BuildError> {
        let mut granted = Self::default();
        for d in &agent.delegations {
            if tools.iter().any(|t| t == d.name()) {
                granted.delegates.push(delegate(loaded, agent, d, depth)?);
            }
        }
        for (grant, _) in agent.grants() {
            match grant {
                ToolGrant::Custom(c) if tools.contains(&c.name.value) => {
                    if let Some(spec) = custom(c) {
                        granted.custom.push(spec);
                    }
                }
                ToolGrant::Mcp(m) => {
                    // One tool (the checks refuse `max_calls:` on more), if still granted.
                    let names = grant.names();
                    if let (Some(max), [name]) = (&m.max_calls, names.as_slice())
                        && tools.contains(name)
                    {
                        granted.mcp_limits.push((name.clone(), max.value));
                    }
                }
                ToolGrant::Builtin(b) if b.name.value == "web_fetch" => {
                    granted.fence = Fence::new(b.allow.iter().map(|h| h.value.clone()));
                }
                _ => {}
            }
        }
        Ok(granted)
    }

    /// Whether a sub-agent of the grant (or one of theirs) may ask a person (`ask_human`):
    /// the step then needs an answerer even when it does not ask itself.
    pub fn asks_people(&self) -> bool {
        self.delegates
            .iter()
            .any(|d| d.step.tools.iter().any(|t| t == "ask_human") || d.step.granted.asks_people())
    }

    /// Whether `name` is one of these tools rather than a built-in.
    pub fn owns(&self, name: &str) -> bool {
        self.custom.iter().any(|c| c.name == name) || self.delegates.iter().any(|d| d.name == name)
    }

    /// What the step's key adds for these tools; `None` when there are none, so that the
    /// keys of steps without any stay as they were.
    pub fn key_view(&self) -> Option<Value> {
        if self.custom.is_empty()
            && self.fence.hosts().is_empty()
            && self.delegates.is_empty()
            && self.mcp_limits.is_empty()
        {
            return None;
        }
        let mut view = json!({
            "custom": self.custom.iter().map(CustomSpec::key_view).collect::<Vec<_>>(),
            "web_fetch_allow": self.fence.hosts(),
            "delegates": self.delegates.iter().map(|d| json!({
                "name": d.name,
                "description": d.description,
                "agent": d.step.key_view(),
            })).collect::<Vec<_>>(),
        });
        // Only when there are any, so that the keys of steps without stay as they were.
        if !self.mcp_limits.is_empty() {
            view["mcp_max_calls"] = json!(self.mcp_limits);
        }
        Some(view)
    }
}

/// A custom tool's spec; `None` without `run:` (loading refuses that).
fn custom(c: &CustomGrant) -> Option<CustomSpec> {
    let name = c.name.value.clone();
    let run = c.run.as_ref()?.value.clone();
    Some(CustomSpec {
        description: c
            .description
            .clone()
            .unwrap_or_else(|| format!("Runs the pipeline's `{name}` command.")),
        name,
        run,
        required: c.required,
        max_calls: c.max_calls,
        pinned: c.args.clone(),
        touches: c.touches.clone(),
    })
}

/// The sub-agent of `delegation` as `parent` grants it (resolved at load): its own step,
/// built like a pipeline step of its own whose prompt is filled in at each call.
fn delegate(
    loaded: &Loaded,
    parent: &Agent,
    delegation: &Delegation,
    depth: usize,
) -> Result<Delegate, BuildError> {
    if depth >= MAX_DELEGATION_DEPTH {
        return Err(BuildError::Unsupported(format!(
            "agent `{}` delegates deeper than {MAX_DELEGATION_DEPTH} agents",
            parent.name.value
        )));
    }
    let (grant, child) = (&delegation.grant, delegation.name());
    let agent = loaded.pipeline.agent_at(delegation.agent);
    let call = AgentCall::new(Arc::new(agent.clone()));
    let step = Step::agent(call.clone());
    let built = AgentStep::build_nested(loaded, &step, &call, depth + 1)?;
    let percent = parent
        .delegate_budget_percent
        .as_ref()
        .or(loaded
            .pipeline
            .defaults
            .as_ref()
            .and_then(|d| d.delegate_budget_percent.as_ref()))
        .map_or(DEFAULT_DELEGATE_PERCENT, |p| p.value);
    Ok(Delegate {
        name: child.to_owned(),
        description: grant
            .description
            .clone()
            .or_else(|| agent.description.clone())
            .unwrap_or_else(|| {
                format!("Ask the agent `{child}`; put the whole task in `request`.")
            }),
        step: Box::new(built),
        percent,
    })
}

/// The session tools a grant's extras become when the step runs, with what the step checks
/// after its turns.
pub(crate) struct Built {
    /// Custom tools and sub-agent tools.
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    /// The custom tools with `required: true`.
    pub(crate) required: Required,
}

impl Granted {
    /// The custom tools, confined to `ws`, and the sub-agent tools, sharing `parent`.
    pub(crate) fn build(&self, ws: &Workspace, parent: &Parent) -> Result<Built, TemplateError> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut required = Required::default();
        for spec in &self.custom {
            let tally = Arc::new(Tally::default());
            if spec.required {
                required.push(spec.name.clone(), tally.clone());
            }
            tools.push(Arc::new(CustomTool::new(spec.clone(), ws.clone(), tally)?));
        }
        for delegate in &self.delegates {
            tools.push(Arc::new(DelegateTool::new(
                delegate.clone(),
                parent.clone(),
            )));
        }
        Ok(Built { tools, required })
    }
}
