//! What loading fills in before the checks, so everything after it sees one spelling:
//!
//! * `*_file:` keys are read (relative to the pipeline file): a task's `run_file:`, an
//!   agent's `system_file:`, an agent step's `prompt_file:` (the path form), an `expr:`
//!   resource type's `check_file:`/`in_file:`/`out_file:`, and the
//!   whole-document `file:` of a `tasks:` or `agents:` entry (keys written beside it win);
//! * a `task:` step without `run:` takes the `tasks:` entry of its name;
//! * `defaults: model` fills in for an agent whose `source:` names no model;
//! * an agent's `timeout:` and `attempts:` fill in for its steps;
//! * an `ensemble:`'s members get its vocabulary of verdicts, and its judge a step;
//! * top-level `mcp_servers:` an agent is granted (`{ mcp: NAME }`) join its own, and
//!   `auth: { type: bearer, api_key_env }` becomes `bearer_env:`.
//!
//! A default never overrides: a key written on the step or agent always wins.

use std::path::{Path, PathBuf};

use super::agent_def::{Agent, McpServerSpec};
use super::at::{At, Pos};
use super::diagnostic::{Diagnostic, Problem};
use super::format::{InParallel, Job, Pipeline, RawStep, RunSpec};
use super::step_keys::{Approval, PromptFile};

/// Fills in `pipeline`; the problems found (unreadable files, keys set twice).
pub fn resolve(file: &Path, pipeline: &mut Pipeline<RawStep>) -> Vec<Diagnostic> {
    let mut r = Resolver {
        file,
        base: super::dir_of(file),
        out: Vec::new(),
    };
    let mut tasks = std::mem::take(&mut pipeline.tasks);
    for task in &mut tasks {
        r.task_entry(task);
    }
    pipeline.tasks = tasks;
    for agent in &mut pipeline.agents {
        r.agent(agent);
    }
    if let Some(model) = pipeline.defaults.as_ref().and_then(|d| d.model.clone()) {
        for agent in &mut pipeline.agents {
            if agent.source.model.is_none() && agent.source.endpoint.is_none() {
                agent.source.model = Some(model.clone());
            }
        }
    }
    for t in &mut pipeline.resource_types {
        if let Some(e) = t.config.expr.as_mut() {
            r.expr_files(&mut e.value);
        }
    }
    for server in &mut pipeline.mcp_servers {
        bearer_from_auth(server);
    }
    for agent in &mut pipeline.agents {
        adopt_servers(agent, &pipeline.mcp_servers);
    }
    let (tasks, agents) = (&pipeline.tasks, &pipeline.agents);
    for job in &mut pipeline.jobs {
        walk_job(job, &mut |s: &mut At<RawStep>| r.step(s, tasks, agents));
    }
    r.out
}

/// Calls `f` on every step of `job`, its plan and then its hooks, nested steps included,
/// parents first.
pub fn walk_job(job: &mut Job<RawStep>, f: &mut dyn FnMut(&mut At<RawStep>)) {
    walk(&mut job.plan, f);
    for hook in [
        &mut job.on_success,
        &mut job.on_failure,
        &mut job.on_error,
        &mut job.on_abort,
        &mut job.ensure,
    ]
    .into_iter()
    .flatten()
    {
        walk(std::slice::from_mut(hook.as_mut()), f);
    }
}

/// Calls `f` on every step of `steps`, nested ones and hooks included, parents first.
pub fn walk(steps: &mut [At<RawStep>], f: &mut dyn FnMut(&mut At<RawStep>)) {
    for step in steps {
        f(step);
        let s = &mut step.value;
        if let Some(d) = &mut s.do_ {
            walk(d, f);
        }
        match &mut s.in_parallel {
            Some(InParallel::Steps(v)) => walk(v, f),
            Some(InParallel::Config(c)) => walk(&mut c.steps, f),
            None => {}
        }
        if let Some(race) = &mut s.race {
            walk(&mut race.steps, f);
        }
        if let Some(e) = &mut s.ensemble {
            walk(&mut e.value.agents, f);
            if let Some(judge) = &mut e.value.judge {
                walk(std::slice::from_mut(judge.as_mut()), f);
            }
        }
        for nested in [
            &mut s.try_,
            &mut s.on_success,
            &mut s.on_failure,
            &mut s.on_error,
            &mut s.on_abort,
            &mut s.ensure,
        ]
        .into_iter()
        .flatten()
        {
            walk(std::slice::from_mut(nested.as_mut()), f);
        }
    }
}

struct Resolver<'f> {
    file: &'f Path,
    base: PathBuf,
    out: Vec<Diagnostic>,
}

impl Resolver<'_> {
    fn push(&mut self, pos: Pos, problem: Problem, message: String, hint: &str) {
        self.out
            .push(Diagnostic::new(self.file, pos, problem, message, hint));
    }

    /// The text of `path` (relative to the pipeline file); `None` after reporting why not.
    fn read(&mut self, key: &str, path: &At<String>) -> Option<String> {
        let full = self.base.join(&path.value);
        match std::fs::read_to_string(&full) {
            Ok(text) if text.trim().is_empty() => {
                self.push(
                    path.pos,
                    Problem::InvalidValue,
                    format!("`{key}: {}` is empty", path.value),
                    "write the content into the file, or use the inline key instead",
                );
                None
            }
            Ok(text) => Some(text),
            Err(e) => {
                self.push(
                    path.pos,
                    Problem::Read,
                    format!("`{key}: {}` cannot be read: {e}", path.value),
                    "the path is relative to the pipeline file's directory",
                );
                None
            }
        }
    }

    /// An `expr:` type's `check_file:`, `in_file:`, `out_file:`, each read into its stage
    /// (both set is reported by the type's checks).
    fn expr_files(&mut self, e: &mut super::resource_type::ExprConfig) {
        for (key, inline, file) in [
            ("check_file", &mut e.check, &mut e.check_file),
            ("in_file", &mut e.in_, &mut e.in_file),
            ("out_file", &mut e.out, &mut e.out_file),
        ] {
            if inline.is_none()
                && let Some(path) = file.take()
            {
                *inline = self.read(key, &path).map(|text| At {
                    value: text,
                    pos: path.pos,
                });
            }
        }
    }

    fn both(&mut self, pos: Pos, key: &str, inline: &str) {
        self.push(
            pos,
            Problem::BadStep,
            format!("`{key}:` and `{inline}:` are both set"),
            &format!("keep one of them: `{inline}:` inline, or `{key}:` to read it from a file"),
        );
    }

    /// A `tasks:` entry: its `file:` document, then its `run_file:`.
    fn task_entry(&mut self, task: &mut At<RawStep>) {
        if let Some(path) = task.value.file.take()
            && let Some(doc) = self.include::<RawStep>(&path, None)
        {
            fill_step(&mut task.value, &doc);
        }
        self.run_file(task);
    }

    fn run_file(&mut self, step: &mut At<RawStep>) {
        let Some(path) = step.value.run_file.take() else {
            return;
        };
        if step.value.run.is_some() {
            return self.both(path.pos, "run_file", "run");
        }
        if let Some(text) = self.read("run_file", &path) {
            step.value.run = Some(At {
                value: RunSpec::Shell(text),
                pos: path.pos,
            });
        }
    }

    fn agent(&mut self, agent: &mut Agent) {
        if let Some(path) = agent.file.take()
            && let Some(doc) = self.include::<Agent>(&path, Some(&agent.name.value))
        {
            fill_agent(agent, doc);
        }
        if let Some(path) = agent.system_file.take() {
            if agent.system.is_some() {
                return self.both(path.pos, "system_file", "system");
            }
            agent.system = self.read("system_file", &path);
        }
    }

    /// Parses the YAML document at `path` as a `T`. An agent document may leave out its
    /// name, which is then `name`.
    fn include<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &At<String>,
        name: Option<&str>,
    ) -> Option<T> {
        let text = self.read("file", path)?;
        // The document's own errors are reported in the document.
        let full = self.base.join(&path.value);
        let named = name.filter(|_| !text.lines().any(|l| l.starts_with("name:")));
        let prefixed = match named {
            Some(n) => format!("name: {}\n{text}", serde_json::Value::from(n)),
            None => text.clone(),
        };
        let refused = ["\nfile:", "\nrun_file:", "\nsystem_file:", "\nprompt_file:"]
            .iter()
            .any(|k| format!("\n{text}").contains(k));
        if refused {
            self.push(
                path.pos,
                Problem::InvalidValue,
                format!("`file: {}` includes another file", path.value),
                "an included document cannot itself use `file:` or `*_file:` (one level only)",
            );
            return None;
        }
        match serde_saphyr::from_str::<T>(&prefixed) {
            Ok(doc) => Some(doc),
            Err(e) => {
                let mut d = super::load::diagnose(&full, &prefixed, &e);
                if named.is_some() {
                    d.line = d.line.map(|l| l.saturating_sub(1));
                }
                self.out.push(d);
                None
            }
        }
    }

    fn step(&mut self, step: &mut At<RawStep>, tasks: &[At<RawStep>], agents: &[Agent]) {
        self.run_file(step);
        // Before its members are walked: they get the block's vocabulary, and the judge's
        // step is made so that it is walked (and filled in) like theirs.
        if let Some(e) = &mut step.value.ensemble {
            e.value.expand();
        }
        if let Some(At {
            value: PromptFile::Path(path),
            pos,
        }) = step.value.prompt_file.clone()
        {
            step.value.prompt_file = None;
            if step.value.prompt.is_some() {
                self.both(pos, "prompt_file", "prompt");
            } else {
                let path = At { value: path, pos };
                step.value.prompt = self.read("prompt_file", &path);
            }
        }
        let s = &mut step.value;
        if let Some(name) = s.task.as_ref().filter(|_| s.run.is_none())
            && let Some(def) = tasks
                .iter()
                .find(|t| t.value.name.as_ref().is_some_and(|n| n.value == name.value))
        {
            fill_step(s, &def.value);
        }
        self.mappings(s);
        // `approval: { message, timeout, on_timeout }` is the step's own `message:`,
        // `timeout:` and `on_timeout:`; the policy stays in the mapping (typing reads it).
        if let Some(At {
            value: Approval::Spec(spec),
            pos,
        }) = s.approval.clone()
        {
            fill(&mut s.message, &spec.message);
            fill(&mut s.timeout, &spec.timeout);
            fill(&mut s.on_timeout, &spec.on_timeout);
            let name = spec.name.clone().unwrap_or_else(|| "approval".to_owned());
            s.approval = Some(At {
                value: Approval::Spec(super::step_keys::ApprovalSpec {
                    name: Some(name),
                    message: None,
                    timeout: None,
                    on_timeout: None,
                    ..spec
                }),
                pos,
            });
        }
        if let Some(agent) = s
            .agent
            .as_ref()
            .and_then(|a| agents.iter().find(|d| d.name.value == a.value))
        {
            fill(&mut s.timeout, &agent.timeout);
            fill(&mut s.attempts, &agent.attempts);
        }
    }
}

impl Resolver<'_> {
    /// `input_mapping:` / `output_mapping:` name, in `inputs:` and `outputs:`, the artifact
    /// instead of the name the command uses; the step directory shows it under that name
    /// (see `Step::mounts`).
    fn mappings(&mut self, s: &mut RawStep) {
        for (mapping, list, key) in [
            (&s.input_mapping, &mut s.inputs, "input_mapping"),
            (&s.output_mapping, &mut s.outputs, "output_mapping"),
        ] {
            let Some(mapping) = mapping else { continue };
            for (inner, artifact) in &mapping.value {
                match list.iter_mut().find(|i| i.value == *inner) {
                    Some(entry) => entry.value.clone_from(artifact),
                    None => self.out.push(Diagnostic::new(
                        self.file,
                        mapping.pos,
                        Problem::InvalidValue,
                        format!("`{key}` maps `{inner}`, which the task does not declare"),
                        format!(
                            "map one of the task's own {} (the names its command uses)",
                            if key == "input_mapping" {
                                "inputs"
                            } else {
                                "outputs"
                            }
                        ),
                    )),
                }
            }
        }
    }
}

fn fill<T: Clone>(mine: &mut Option<T>, theirs: &Option<T>) {
    if mine.is_none() {
        mine.clone_from(theirs);
    }
}

fn fill_vec<T: Clone>(mine: &mut Vec<T>, theirs: &[T]) {
    if mine.is_empty() {
        mine.extend_from_slice(theirs);
    }
}

/// What a `task:` step takes from its definition (a `tasks:` entry or an included
/// document): everything it leaves out, except its name and where it goes next.
fn fill_step(s: &mut RawStep, d: &RawStep) {
    fill(&mut s.run, &d.run);
    fill(&mut s.fix, &d.fix);
    fill(&mut s.description, &d.description);
    fill(&mut s.timeout, &d.timeout);
    fill(&mut s.attempts, &d.attempts);
    fill(&mut s.confined, &d.confined);
    fill(&mut s.image, &d.image);
    fill(&mut s.network, &d.network);
    fill(&mut s.privileged, &d.privileged);
    fill(&mut s.user, &d.user);
    fill(&mut s.container_limits, &d.container_limits);
    fill(&mut s.assert, &d.assert);
    fill(&mut s.keep_on_failure, &d.keep_on_failure);
    fill(&mut s.when, &d.when);
    fill(&mut s.context, &d.context);
    fill(&mut s.on_success, &d.on_success);
    fill(&mut s.on_failure, &d.on_failure);
    fill(&mut s.on_error, &d.on_error);
    fill(&mut s.on_abort, &d.on_abort);
    fill(&mut s.ensure, &d.ensure);
    fill_vec(&mut s.inputs, &d.inputs);
    fill_vec(&mut s.outputs, &d.outputs);
    fill_vec(&mut s.pass_env, &d.pass_env);
    fill_vec(&mut s.caches, &d.caches);
    if matches!(&s.env, super::container::Env::Map(m) if m.is_empty()) {
        s.env = d.env.clone();
    }
    s.volatile |= d.volatile;
}

/// An agent entry takes what it leaves out from its included document.
fn fill_agent(a: &mut Agent, d: Agent) {
    fill(&mut a.source.model, &d.source.model);
    fill(&mut a.source.endpoint, &d.source.endpoint);
    fill(&mut a.source.api_key_env, &d.source.api_key_env);
    fill(&mut a.system, &d.system);
    fill(&mut a.tools, &d.tools);
    fill(&mut a.max_turns, &d.max_turns);
    fill(&mut a.temperature, &d.temperature);
    fill(&mut a.budget, &d.budget);
    fill(&mut a.limits, &d.limits);
    fill(&mut a.context_window, &d.context_window);
    fill(&mut a.compact_after_tokens, &d.compact_after_tokens);
    fill(&mut a.max_context_bytes, &d.max_context_bytes);
    fill(&mut a.description, &d.description);
    fill(&mut a.top_p, &d.top_p);
    fill(&mut a.max_tokens, &d.max_tokens);
    fill(&mut a.reasoning_effort, &d.reasoning_effort);
    fill(&mut a.delegate_budget_percent, &d.delegate_budget_percent);
    fill(&mut a.preflight, &d.preflight);
    fill(&mut a.settings, &d.settings);
    fill(&mut a.timeout, &d.timeout);
    fill(&mut a.attempts, &d.attempts);
    fill(&mut a.image, &d.image);
    fill(&mut a.network, &d.network);
    fill(&mut a.user, &d.user);
    fill(&mut a.privileged, &d.privileged);
    fill(&mut a.container_limits, &d.container_limits);
    fill_vec(&mut a.env, &d.env);
    fill_vec(&mut a.mcp_servers, &d.mcp_servers);
    fill_vec(&mut a.fallback, &d.fallback);
}

fn bearer_from_auth(server: &mut McpServerSpec) {
    if let Some(auth) = &server.auth
        && auth.value.kind.value == "bearer"
    {
        fill(&mut server.bearer_env, &auth.value.api_key_env);
    }
}

/// Adds to `agent`'s servers the top-level ones its grant names and it does not declare.
fn adopt_servers(agent: &mut Agent, top: &[McpServerSpec]) {
    for server in &mut agent.mcp_servers {
        bearer_from_auth(server);
    }
    let named: Vec<String> = agent
        .grant()
        .into_iter()
        .flatten()
        .filter_map(|t| super::mcp::server_of(&t.value).map(str::to_owned))
        .collect();
    for name in named {
        if agent.mcp_servers.iter().any(|s| s.name.value == name) {
            continue;
        }
        if let Some(server) = top.iter().find(|s| s.name.value == name) {
            agent.mcp_servers.push(server.clone());
        }
    }
}
