//! Checks a parsed pipeline before anything runs: every step has one kind and only its
//! kind's keys, every input is produced by an earlier step, agents and resources exist,
//! tools are built in or come from a declared MCP server, verdict routes land on steps (a
//! backward one bounded by `max_visits`), models resolve and their API key variables are set.
//!
//! `validate` adds checks of this machine ([`CheckScope::machine`], in
//! [`super::check_machine`]): the programs tasks and stdio MCP servers name exist and the
//! local model server answers. The checks of `mcp_servers:` live in [`super::mcp`].

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::agent_call::AgentCall;
use super::at::{At, Pos};
use super::diagnostic::{Diagnostic, Problem, did_you_mean};
use super::format::{Agent, Job, Pipeline, RunSpec, Step};
use super::leaf_step::InputStep;
use super::mcp;
use super::model;
use super::step::StepKind;
use super::tool_grant::ToolGrant;
use super::walk::used_agents;
use crate::tools::{BUILTIN, DEFAULT_GRANT};

/// What to check.
pub struct CheckScope<'a> {
    /// Only this job's agents need resolvable models and keys (`run --job`); `None`: all.
    pub job: Option<&'a str>,
    /// Environment lookup (the process environment outside tests).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Also check this machine: programs exist, the local model server answers.
    pub machine: bool,
}

struct Checker<'a> {
    file: &'a Path,
    pipeline: &'a Pipeline,
    agents: HashMap<&'a str, &'a Agent>,
    out: Vec<Diagnostic>,
}

/// Runs every check; returns all problems found, in file order per job.
pub fn check(file: &Path, pipeline: &Pipeline, scope: &CheckScope<'_>) -> Vec<Diagnostic> {
    let mut c = Checker {
        file,
        pipeline,
        agents: HashMap::new(),
        out: Vec::new(),
    };
    c.definitions();
    for (pos, problem, message, hint) in pipeline
        .workspace
        .iter()
        .flat_map(super::check_container::workspace)
    {
        c.push(pos, problem, message, hint);
    }
    if pipeline.jobs.is_empty() {
        c.push(
            Pos::default(),
            Problem::MissingKey,
            "the pipeline has no jobs",
            "add `jobs:` with at least one job that has a `plan:`",
        );
    }
    for job in &pipeline.jobs {
        c.job(job);
    }
    for finding in super::check_watch::check(pipeline) {
        c.push_finding(finding);
    }
    if let Some(wanted) = scope.job
        && !pipeline.jobs.iter().any(|j| j.name.value == wanted)
    {
        let names: Vec<&str> = pipeline
            .jobs
            .iter()
            .map(|j| j.name.value.as_str())
            .collect();
        c.push(
            Pos::default(),
            Problem::UnknownJob,
            format!("there is no job `{wanted}`"),
            format!("jobs in this file: {}", names.join(", ")),
        );
    }
    let project = file.parent().unwrap_or_else(|| Path::new("."));
    for finding in super::check_hooks::check(pipeline, project, scope.machine) {
        c.push_finding(finding);
    }
    c.models(scope);
    if scope.machine {
        for finding in super::check_machine::check(pipeline, scope.job, scope.env) {
            c.push_finding(finding);
        }
    }
    c.out
}

impl<'a> Checker<'a> {
    fn push(
        &mut self,
        pos: Pos,
        problem: Problem,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.out
            .push(Diagnostic::new(self.file, pos, problem, message, hint));
    }

    fn definitions(&mut self) {
        for finding in super::check_resource::check(self.pipeline) {
            self.push_finding(finding);
        }
        let mut seen = BTreeSet::new();
        for r in &self.pipeline.resources {
            if !seen.insert(r.name.value.as_str()) {
                self.push(
                    r.name.pos,
                    Problem::Duplicate,
                    format!("resource `{}` is defined twice", r.name.value),
                    "give each resource its own name",
                );
            }
        }
        for a in &self.pipeline.agents {
            if self.agents.insert(a.name.value.as_str(), a).is_some() {
                self.push(
                    a.name.pos,
                    Problem::Duplicate,
                    format!("agent `{}` is defined twice", a.name.value),
                    "give each agent its own name",
                );
            }
            for finding in mcp::check_servers(a) {
                self.push_finding(finding);
            }
            for finding in super::check_container::agent(a) {
                self.push_finding(finding);
            }
            let owner = format!("agent `{}`", a.name.value);
            for finding in super::check_resource_type::env_names(&a.env, &owner) {
                self.push_finding(finding);
            }
            for finding in super::conversation::check(a) {
                self.push_finding(finding);
            }
            for finding in super::check_controls::agent_findings(a, &self.pipeline.prices) {
                self.push_finding(finding);
            }
            // Custom and sub-agent tools are not names to look up: `check_agent` checks them.
            for t in a.tools.iter().flatten() {
                let named = t.value.is_named_tool();
                for name in t.value.names().into_iter().filter(|_| named) {
                    self.tool(
                        &At {
                            value: name,
                            pos: t.pos,
                        },
                        a,
                    );
                }
            }
        }
        for finding in super::check_agent::check(self.pipeline) {
            self.push_finding(finding);
        }
        let mut jobs = BTreeSet::new();
        for j in &self.pipeline.jobs {
            if !jobs.insert(j.name.value.as_str()) {
                self.push(
                    j.name.pos,
                    Problem::Duplicate,
                    format!("job `{}` is defined twice", j.name.value),
                    "give each job its own name",
                );
            }
        }
    }

    fn push_finding(&mut self, (pos, problem, message, hint): super::diagnostic::Finding) {
        self.push(pos, problem, message, hint);
    }

    /// Checks one granted tool name of `agent`; whether it is valid.
    fn tool(&mut self, t: &At<String>, agent: &Agent) -> bool {
        if mcp::server_of(&t.value).is_some() {
            let finding = mcp::undeclared(agent, &t.value, t.pos);
            let ok = finding.is_none();
            finding.into_iter().for_each(|f| self.push_finding(f));
            return ok;
        }
        // The agent's own custom tools and sub-agents, selected by name on a step.
        if agent.grants().any(|(g, _)| match g {
            ToolGrant::Custom(c) => c.name.value == t.value,
            ToolGrant::Agent(a) => a.agent.value == t.value,
            _ => false,
        }) {
            return true;
        }
        if !BUILTIN.contains(&t.value.as_str()) {
            let hint = match did_you_mean(&t.value, BUILTIN.iter().copied()) {
                Some(n) => format!("did you mean `{n}`? built-in tools: {}", BUILTIN.join(", ")),
                None => format!("built-in tools: {}", BUILTIN.join(", ")),
            };
            self.push(
                t.pos,
                Problem::UnknownTool,
                format!("unknown tool `{}`", t.value),
                hint,
            );
            return false;
        }
        true
    }

    fn job(&mut self, job: &'a Job) {
        if job.plan.is_empty() {
            self.push(
                job.name.pos,
                Problem::MissingKey,
                format!("job `{}` has an empty plan", job.name.value),
                "add at least one step under `plan:`",
            );
        }
        for finding in super::check_controls::job_findings(job, &self.agents, &self.pipeline.prices)
        {
            self.push_finding(finding);
        }
        let mut available = BTreeSet::new();
        self.sequence(&job.plan, &mut available);
        for (_, hook) in job.hooks() {
            self.step(hook, &mut available.clone());
        }
        for (pos, problem, message, hint) in super::check_flow_keys::routes(job)
            .into_iter()
            .chain(super::check_flow_keys::job(job))
        {
            self.push(pos, problem, message, hint);
        }
    }

    fn sequence(&mut self, steps: &'a [At<Step>], available: &mut BTreeSet<String>) {
        for s in steps {
            self.step(s, available);
        }
    }

    fn step(&mut self, step: &'a At<Step>, available: &mut BTreeSet<String>) {
        let kind = &step.kind;
        self.step_keys(step);
        self.inputs(step, available);
        self.step_kind(step, kind, available);
        for o in &step.outputs {
            available.insert(o.value.clone());
        }
        for (_, hook) in step.hooks() {
            self.step(hook, &mut available.clone());
        }
    }

    /// The keys every step may carry (that each belongs to its kind was made sure when
    /// the step was typed): artifacts, containers, and `attempts`.
    fn step_keys(&mut self, step: &'a At<Step>) {
        self.out
            .extend(super::artifact::check_step(self.file, step));
        let findings = super::check_container::step(step)
            .into_iter()
            .chain(super::check_controls::keep_findings(step));
        for (pos, problem, message, hint) in findings {
            self.push(pos, problem, message, hint);
        }
        if let Some(a) = &step.attempts
            && a.value == 0
        {
            self.push(
                a.pos,
                Problem::InvalidValue,
                "`attempts` must be at least 1",
                "write `attempts: 1` or more (1 means no retry)",
            );
        }
    }

    /// What each kind of step asks of the pipeline; blocks check the steps inside them.
    fn step_kind(
        &mut self,
        step: &'a At<Step>,
        kind: &'a StepKind,
        available: &mut BTreeSet<String>,
    ) {
        match kind {
            StepKind::Task { run, .. } => {
                if let RunSpec::Exec(cfg) = &run.value
                    && cfg.path.trim().is_empty()
                {
                    self.push(
                        run.pos,
                        Problem::InvalidValue,
                        "`run.path` is empty",
                        "name the program to run, e.g. `path: make`",
                    );
                }
            }
            StepKind::Agent(call) => self.agent_step(step, call),
            StepKind::Get(super::leaf_step::GetStep { resource: r, .. })
            | StepKind::Put(super::leaf_step::PutStep { resource: r, .. }) => {
                if !self
                    .pipeline
                    .resources
                    .iter()
                    .any(|x| x.name.value == r.value)
                {
                    self.push(
                        r.pos,
                        Problem::BadStep,
                        format!("no resource named `{}`", r.value),
                        "add it under `resources:` with a `name`, `type` and `source`",
                    );
                }
                if matches!(kind, StepKind::Get(_)) {
                    available.insert(step.display_name());
                }
            }
            StepKind::Approval {
                on_timeout, policy, ..
            } => self.approval_step(step, on_timeout.as_ref(), policy),
            StepKind::Input(asked) => self.input_step(step, asked),
            StepKind::LoadVar { name, file } => {
                for (pos, problem, message, hint) in
                    super::check_flow_keys::load_var(step, name, file.as_ref())
                {
                    self.push(pos, problem, message, hint);
                }
            }
            // Its URL and method were checked when it was typed.
            StepKind::Http { .. } => {}
            StepKind::Do(steps) => self.sequence(steps, available),
            StepKind::InParallel(p) => {
                if let Some(l) = p.limit()
                    && l == 0
                {
                    self.push(
                        step.pos,
                        Problem::InvalidValue,
                        "`limit` must be at least 1",
                        "leave `limit` out to run every step at once",
                    );
                }
                let before = available.clone();
                for s in p.steps() {
                    let mut mine = before.clone();
                    self.step(s, &mut mine);
                    available.extend(mine);
                }
            }
            StepKind::Try(inner) => self.step(inner, available),
            StepKind::Race(_) | StepKind::Ensemble(_) => {
                let mut children = step.children();
                if let StepKind::Ensemble(e) = kind {
                    let names: Vec<&str> = self.agents.keys().copied().collect();
                    for finding in super::check_ensemble::check(e, step.pos, &names) {
                        self.push_finding(finding);
                    }
                    // A judge that is no agent was reported just now, as the rule it is not.
                    children.retain(|c| match &c.kind {
                        StepKind::Agent(call) => {
                            self.agents.contains_key(call.agent.value.as_str())
                        }
                        _ => true,
                    });
                }
                let before = available.clone();
                for s in children {
                    let mut mine = before.clone();
                    self.step(s, &mut mine);
                    available.extend(mine);
                }
            }
        }
    }

    /// Each input must be produced by an earlier step (`available`).
    fn inputs(&mut self, step: &Step, available: &BTreeSet<String>) {
        for input in &step.inputs {
            if input.value == super::resource_type::ALL_INPUTS {
                if !matches!(step.kind, StepKind::Put(_)) {
                    self.push(
                        input.pos,
                        Problem::InvalidValue,
                        "`inputs: all` is valid only on a `put:` step".to_owned(),
                        "list the artifacts this step reads: `inputs: [a, b]`",
                    );
                }
                continue;
            }
            if !available.contains(&input.value) {
                let near = did_you_mean(&input.value, available.iter().map(String::as_str));
                let hint = match near {
                    Some(n) => format!(
                        "did you mean `{n}`? an input must be an `outputs:` entry (or a `get:`) of an earlier step"
                    ),
                    None if available.is_empty() => format!(
                        "no earlier step produces anything: add `outputs: [{}]` to an earlier step, or a `get: {}`",
                        input.value, input.value
                    ),
                    None => format!(
                        "earlier steps produce: {}; add `outputs: [{}]` to the step that makes it",
                        available.iter().cloned().collect::<Vec<_>>().join(", "),
                        input.value
                    ),
                };
                self.push(
                    input.pos,
                    Problem::UnproducedInput,
                    format!(
                        "input `{}` is not produced by any earlier step",
                        input.value
                    ),
                    hint,
                );
            }
        }
    }

    fn input_step(&mut self, step: &At<Step>, asked: &InputStep) {
        let Some(question) = asked.question() else {
            self.push(
                step.pos,
                Problem::BadStep,
                "an `input:` step has no `question:`",
                "add `question: What should ...?` (what the person is asked)",
            );
            return;
        };
        if step.outputs.is_empty() {
            self.push(
                step.pos,
                Problem::BadStep,
                "an `input:` step has no `outputs:`",
                "add `outputs: [answer]`: the answer is written to answer.json in it",
            );
        }
        if let Err(reason) = question.compiles() {
            self.push(
                step.pos,
                Problem::InvalidValue,
                format!("`schema:` {reason}"),
                "write a JSON Schema in YAML, e.g. `schema: { type: integer, minimum: 1 }`",
            );
        } else if let Some(default) = &question.default
            && let Err(reason) = question.check(default)
        {
            self.push(
                step.pos,
                Problem::InvalidValue,
                format!("`default:` {default} is not an answer the step takes: {reason}"),
                "give a default that fits `schema:` and `choices:`",
            );
        }
    }

    fn approval_step(
        &mut self,
        step: &At<Step>,
        on_timeout: Option<&At<String>>,
        policy: &super::approval_policy::ApprovalPolicy,
    ) {
        for finding in policy.problems(on_timeout, step.timeout.is_some(), step.pos) {
            self.push_finding(finding);
        }
    }

    fn agent_step(&mut self, step: &Step, call: &AgentCall) {
        let name = &call.agent;
        // Refused before the agent starts, as in `steps`: an empty message commits nothing.
        if call.commit.as_deref().is_some_and(|m| m.trim().is_empty()) {
            self.push(
                name.pos,
                Problem::InvalidValue,
                "`commit:` is empty",
                "give the commit a message, or leave `commit:` out to wipe the agent's changes",
            );
        }
        // An unknown agent was reported when the step was typed (its definition there is
        // a stand-in, whose grant says nothing about the step's tools).
        if !self.agents.contains_key(name.value.as_str()) {
            return;
        }
        let agent: &Agent = &call.def;
        let granted = agent.grant();
        let grant: Vec<&str> = match &granted {
            Some(t) => t.iter().map(|t| t.value.as_str()).collect(),
            None => DEFAULT_GRANT.to_vec(),
        };
        for t in call.tools.iter().flatten() {
            if self.tool(t, agent) && !mcp::covers(&grant, &t.value) {
                self.push(
                    t.pos,
                    Problem::BadStep,
                    format!(
                        "agent `{}` is not granted `{}`; a step can only narrow the grant",
                        name.value, t.value
                    ),
                    format!(
                        "add `{}` to the agent's `tools:` or remove it here",
                        t.value
                    ),
                );
            }
        }
        for finding in
            super::check_controls::step_findings(step, call, agent, &self.pipeline.prices)
        {
            self.push_finding(finding);
        }
        for entry in call.verdicts.iter().flatten() {
            if entry.value.pairs().len() != 1 {
                self.push(
                    entry.pos,
                    Problem::BadStep,
                    "each verdict is one `- choice: step` entry",
                    "write one verdict per list item, e.g. `- approve: publish`",
                );
            }
        }
    }

    fn models(&mut self, scope: &CheckScope<'_>) {
        for (_, resolved) in used_agents(self.pipeline, scope.job, scope.env) {
            let err = resolved.and_then(|m| m.check_key(scope.env));
            if let Err(e) = err {
                let problem = match e {
                    model::ModelError::MissingKey { .. } => Problem::MissingApiKey,
                    _ => Problem::Model,
                };
                self.push(e.pos(), problem, e.to_string(), e.hint());
            }
        }
    }
}

/// The message and hint of an `agent:` naming no agent of `known` (the file's agents).
pub(super) fn unknown_agent(name: &str, known: &[String]) -> (String, String) {
    let hint = match did_you_mean(name, known.iter().map(String::as_str)) {
        Some(n) => format!("did you mean `{n}`? or define `{name}` under `agents:`"),
        None if known.is_empty() => {
            format!("define it under `agents:` (`- name: {name}` with a `source:`)")
        }
        None => format!(
            "agents in this file: {}; or define `{name}` under `agents:`",
            known.join(", ")
        ),
    };
    (format!("unknown agent `{name}`"), hint)
}
