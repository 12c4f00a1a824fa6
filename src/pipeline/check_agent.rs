//! The checks of the agent keys: the dials and options of `agents:` entries, tool
//! mappings, `defaults:`, `tasks:`, and the agent and task step keys that point elsewhere
//! (`fix:`, `context: { from }`, `dir:`, `context_paths:`, `prompt_file:`,
//! `input_mapping:`). Also the `validate` warnings about keys that load but do nothing here.

use std::collections::{BTreeMap, BTreeSet};

use super::agent_call::AgentCall;
use super::agent_def::Agent;
use super::at::{At, Pos};
use super::diagnostic::{Finding, Problem};
use super::format::{Pipeline, Step};
use super::step::StepKind;
use super::step_keys::CONTEXT_LEVELS;
use super::tool_grant::{Stray, ToolGrant};

/// The deepest chain of agents calling agents as tools.
pub const MAX_DELEGATION_DEPTH: usize = 8;

const EFFORTS: [&str; 3] = ["low", "medium", "high"];

fn finding(pos: Pos, problem: Problem, message: String, hint: &str) -> Finding {
    (pos, problem, message, hint.to_owned())
}

/// Every problem of the agent keys in `pipeline`.
pub fn check(pipeline: &Pipeline) -> Vec<Finding> {
    let mut out = Vec::new();
    let agents: BTreeMap<&str, &Agent> = pipeline
        .agents
        .iter()
        .map(|a| (a.name.value.as_str(), a))
        .collect();
    for agent in &pipeline.agents {
        dials(agent, &mut out);
        for (grant, pos) in agent.grants() {
            tool(agent, grant, pos, &agents, pipeline, &mut out);
        }
    }
    delegation_cycles(&agents, &mut out);
    if let Some(d) = &pipeline.defaults {
        percent(d.delegate_budget_percent.as_ref(), &mut out);
    }
    for server in &pipeline.mcp_servers {
        if let Some(auth) = &server.auth {
            let kind = auth.value.kind.value.as_str();
            if kind != "bearer" && kind != "oauth" {
                out.push(finding(
                    auth.value.kind.pos,
                    Problem::InvalidValue,
                    format!(
                        "`auth.type` of MCP server `{}` is `{kind}`",
                        server.name.value
                    ),
                    "write `bearer` (with `api_key_env:`) or `oauth`",
                ));
            }
            if kind == "bearer" && auth.value.api_key_env.is_none() {
                out.push(finding(
                    auth.pos,
                    Problem::MissingKey,
                    format!(
                        "MCP server `{}`: bearer auth without `api_key_env:`",
                        server.name.value
                    ),
                    "add `api_key_env: VAR`, the variable holding the token",
                ));
            }
        }
    }
    let mut names = BTreeSet::new();
    for task in &pipeline.tasks {
        match &task.value.name {
            None => out.push(finding(
                task.pos,
                Problem::MissingKey,
                "a `tasks:` entry has no `name:`".to_owned(),
                "add `name: NAME`; a `task: NAME` step without `run:` takes this entry",
            )),
            Some(n) if !names.insert(n.value.as_str()) => out.push(finding(
                n.pos,
                Problem::Duplicate,
                format!("task `{}` is defined twice under `tasks:`", n.value),
                "give each task its own name",
            )),
            Some(_) => {}
        }
    }
    for job in &pipeline.jobs {
        let mut deciders = BTreeSet::new();
        let mut all = BTreeSet::new();
        super::walk::visit_job(job, &mut |s| {
            all.insert(s.display_name());
            if matches!(&s.kind, StepKind::Agent(c) if c.verdicts.is_some()) {
                deciders.insert(s.display_name());
            }
        });
        super::walk::visit_job(job, &mut |s| {
            step(s, &all, &deciders, &mut out);
        });
    }
    out
}

fn percent(p: Option<&At<u32>>, out: &mut Vec<Finding>) {
    if let Some(p) = p.filter(|p| p.value == 0 || p.value > 100) {
        out.push(finding(
            p.pos,
            Problem::InvalidValue,
            format!("`delegate_budget_percent` is {}", p.value),
            "write a percentage from 1 to 100",
        ));
    }
}

fn dials(agent: &Agent, out: &mut Vec<Finding>) {
    if let Some(e) = agent
        .reasoning_effort
        .as_ref()
        .filter(|e| !EFFORTS.contains(&e.value.as_str()))
    {
        out.push(finding(
            e.pos,
            Problem::InvalidValue,
            format!(
                "`reasoning_effort` of agent `{}` is `{}`",
                agent.name.value, e.value
            ),
            "write `low`, `medium` or `high`",
        ));
    }
    if let Some(p) = agent
        .top_p
        .as_ref()
        .filter(|p| !(0.0..=1.0).contains(&p.value))
    {
        out.push(finding(
            p.pos,
            Problem::InvalidValue,
            format!("`top_p` of agent `{}` is {}", agent.name.value, p.value),
            "write a number from 0 to 1",
        ));
    }
    if let Some(m) = agent.max_tokens.as_ref().filter(|m| m.value == 0) {
        out.push(finding(
            m.pos,
            Problem::InvalidValue,
            format!("`max_tokens` of agent `{}` is 0", agent.name.value),
            "write the most tokens one response may have, e.g. `2048`, or remove it",
        ));
    }
    percent(agent.delegate_budget_percent.as_ref(), out);
    out.extend(super::check_flow_keys::reserve_outside_across(
        agent.budget.as_ref(),
        &format!("agent `{}`", agent.name.value),
    ));
    if let Some(s) = agent.settings.as_ref().filter(|s| s.value != "project") {
        out.push(finding(
            s.pos,
            Problem::InvalidValue,
            format!(
                "`settings` of agent `{}` is `{}`",
                agent.name.value, s.value
            ),
            "write `settings: project` (the repository's own CLI settings) or remove it",
        ));
    } else if let Some(s) = agent.settings.as_ref().filter(|_| {
        // Configuration scopes are a CLI's: a hosted model has nothing to load them into.
        agent
            .source
            .model
            .as_ref()
            .is_none_or(|m| !m.value.starts_with('@'))
    }) {
        out.push(finding(
            s.pos,
            Problem::InvalidValue,
            format!(
                "`settings` of agent `{}` applies to a CLI-backed model only",
                agent.name.value
            ),
            "give the agent a CLI-backed model (`model: \"@claude/sonnet\"`), or remove `settings:`",
        ));
    }
    for fb in &agent.fallback {
        if let Err(e) = super::model::resolve(&fb.value.source, fb.pos, &|_| None) {
            out.push(finding(e.pos(), Problem::Model, e.to_string(), &e.hint()));
        }
    }
}

fn tool(
    agent: &Agent,
    grant: &ToolGrant,
    pos: Pos,
    agents: &BTreeMap<&str, &Agent>,
    pipeline: &Pipeline,
    out: &mut Vec<Finding>,
) {
    let who = &agent.name.value;
    for stray in grant.strays() {
        let Stray { key, belongs_to } = stray;
        out.push(finding(
            pos,
            Problem::BadStep,
            format!("`{key}:` of a tool of agent `{who}` belongs to {belongs_to}"),
            &format!("remove `{key}:` here; it only applies to {belongs_to}"),
        ));
    }
    match grant {
        ToolGrant::Name(_) => {}
        ToolGrant::Unclear(keys) => {
            let message = if keys.is_empty() {
                format!("a tool of agent `{who}` says neither what nor whom it is")
            } else {
                format!(
                    "a tool of agent `{who}` has several kinds ({})",
                    keys.join(", ")
                )
            };
            out.push(finding(
                pos,
                Problem::BadStep,
                message,
                "write exactly one of `builtin: NAME`, `mcp: SERVER`, `name:` with `run:`, or `agent: NAME`",
            ));
        }
        ToolGrant::Builtin(b) => {
            for host in &b.allow {
                let h = &host.value;
                if h.is_empty() || h.contains(['/', ':', '*', ' ']) {
                    out.push(finding(
                        host.pos,
                        Problem::InvalidValue,
                        format!("`allow:` entry `{h}` is not a bare host name"),
                        "write the host alone, e.g. `example.com` (it covers its subdomains; no scheme, port, path or wildcard)",
                    ));
                }
            }
        }
        ToolGrant::Custom(c) if c.run.is_none() => out.push(finding(
            pos,
            Problem::MissingKey,
            format!("custom tool of agent `{who}` has no `run:`"),
            "add `run:` with the command (its `{{ .args.NAME }}` are the tool's parameters)",
        )),
        ToolGrant::Custom(_) => {}
        ToolGrant::Agent(a) => {
            let child = &a.agent;
            if !agents.contains_key(child.value.as_str()) {
                let unknown = super::delegation::Unknown {
                    parent: who.to_owned(),
                    agent: child.clone(),
                };
                let (message, hint) = unknown.said();
                out.push(finding(child.pos, Problem::UnknownAgent, message, hint));
            }
        }
        ToolGrant::Mcp(m) => {
            let server = &m.server;
            if !agent
                .mcp_servers
                .iter()
                .any(|s| s.name.value == server.value)
                && !pipeline
                    .mcp_servers
                    .iter()
                    .any(|s| s.name.value == server.value)
            {
                out.push(finding(
                    server.pos,
                    Problem::InvalidValue,
                    format!("agent `{who}` is granted MCP server `{}`, which is not declared", server.value),
                    "declare it under the top-level `mcp_servers:` (with `command:` or `endpoint:`)",
                ));
            }
            if let Some(max) = &m.max_calls
                && m.tools.len() != 1
            {
                out.push(finding(
                    max.pos,
                    Problem::InvalidValue,
                    format!(
                        "`max_calls:` of agent `{who}`'s grant of MCP server `{}` needs one tool",
                        server.value
                    ),
                    "a budget is per tool: grant the tool alone (`tool: NAME`) with `max_calls:`, in an entry of its own",
                ));
            }
        }
    }
}

/// Agents granted as tools: no agent may reach itself, and no chain is deeper than
/// [`MAX_DELEGATION_DEPTH`].
fn delegation_cycles(agents: &BTreeMap<&str, &Agent>, out: &mut Vec<Finding>) {
    fn children(a: &Agent) -> impl Iterator<Item = &At<String>> {
        a.delegates().map(|d| &d.agent)
    }
    fn depth(name: &str, agents: &BTreeMap<&str, &Agent>, path: &mut Vec<String>) -> usize {
        if path.iter().any(|p| p == name) || path.len() > MAX_DELEGATION_DEPTH {
            return usize::MAX;
        }
        let Some(agent) = agents.get(name) else {
            return 0;
        };
        path.push(name.to_owned());
        let deepest = children(agent)
            .map(|c| depth(&c.value, agents, path).saturating_add(1))
            .max()
            .unwrap_or(0);
        path.pop();
        deepest
    }
    for agent in agents.values() {
        if children(agent).next().is_some()
            && depth(&agent.name.value, agents, &mut Vec::new()) > MAX_DELEGATION_DEPTH
        {
            out.push(finding(
                agent.name.pos,
                Problem::InvalidValue,
                format!(
                    "agent `{}` delegates in a cycle, or deeper than {MAX_DELEGATION_DEPTH} agents",
                    agent.name.value
                ),
                "an agent granted as a tool may not (through others) be granted itself",
            ));
        }
    }
}

fn step(s: &Step, all: &BTreeSet<String>, deciders: &BTreeSet<String>, out: &mut Vec<Finding>) {
    let name = s.display_name();
    if let StepKind::Agent(call) = &s.kind {
        agent_keys(s, call, &name, out);
    }
    if let Some(ctx) = &s.context {
        for (from, level) in &ctx.value.from {
            let problem = if *from == name {
                Some("a step cannot read its own decision".to_owned())
            } else if !all.contains(from) {
                Some(format!("there is no step `{from}` in this job"))
            } else if !deciders.contains(from) {
                Some(format!(
                    "step `{from}` declares no `verdicts:`, so it has no decision to hand on"
                ))
            } else {
                None
            };
            if let Some(why) = problem {
                out.push(finding(
                    ctx.pos,
                    Problem::InvalidValue,
                    format!("`context.from` of step `{name}`: {why}"),
                    "name an agent step of this job that has `verdicts:`",
                ));
            }
            if !CONTEXT_LEVELS.contains(&level.value.as_str()) {
                out.push(finding(
                    level.pos,
                    Problem::InvalidValue,
                    format!("`context.from.{from}` is `{}`", level.value),
                    "write `verdict`, `note` or `full`",
                ));
            }
        }
    }
}

/// The checks of an agent step's `dir:` and `prompt_file:` against its inputs and outputs.
fn agent_keys(s: &Step, call: &AgentCall, name: &str, out: &mut Vec<Finding>) {
    if let Some(dir) = &call.dir {
        let artifact = dir.value.split('/').next().unwrap_or_default();
        let declared = s
            .inputs
            .iter()
            .chain(&s.outputs)
            .any(|i| i.value == artifact);
        if !declared || dir.value.starts_with('/') || dir.value.split('/').any(|c| c == "..") {
            out.push(finding(
                dir.pos,
                Problem::InvalidValue,
                format!(
                    "`dir: {}` of step `{name}` is not inside one of its inputs or outputs",
                    dir.value
                ),
                &format!(
                    "start it with an artifact the step declares, e.g. add `inputs: [{artifact}]`"
                ),
            ));
        }
    }
    if let Some(f) = call.prompt.file()
        && !s.inputs.iter().any(|i| i.value == f.artifact.value)
    {
        out.push(finding(
            f.artifact.pos,
            Problem::InvalidValue,
            format!("`prompt_file` of step `{name}` reads artifact `{}`, which is not one of its inputs", f.artifact.value),
            &format!("add `inputs: [{}]`", f.artifact.value),
        ));
    }
}

/// What `validate` warns about: keys that load but that treadle cannot act on here, and
/// guard hooks that let calls through when they fail (`on_hook_error: allow`).
pub fn warnings(pipeline: &Pipeline) -> Vec<(Pos, String)> {
    pipeline
        .agents
        .iter()
        .filter_map(|a| a.image.as_ref())
        .map(|i| (i.pos, super::container::no_runtime(&i.value)))
        .chain(super::check_hooks::warnings(pipeline))
        .collect()
}
