//! The pipeline file: its format, loading with located errors, the checks, model
//! resolution and the JSON Schema.
//!
//! # Layout
//!
//! * `at`: values with their position in the file.
//! * `format`: the file's types (serde): the pipeline, its resources and jobs.
//! * `raw_step`: a step as written ([`RawStep`]), every key of every kind in one mapping.
//! * `in_parallel`: `in_parallel:`, a list of steps or `{ steps, limit, fail_fast }`.
//! * `agent_def`: the agent definitions of `agents:` (model, tools, dials, budgets).
//! * `tool_grant`: one entry of an agent's `tools:`, typed when parsed ([`tool_grant::ToolGrant`]:
//!   a name, or a builtin/mcp/custom/agent mapping).
//! * `delegation`: a sub-agent granted as a tool, resolved at load to an agent of the
//!   pipeline ([`delegation::AgentRef`]).
//! * `step_keys`: `fix:`, `context: { from }` and `prompt_file:` of task and agent steps,
//!   the mapping form of `approval:`, and a step's `assert:`.
//! * `approval_policy`: an approval's assignees, quorum and deadline policy, and its checks.
//! * `defaults`: `defaults:`, what agents get when they say nothing.
//! * `hook_def`: `hooks:` of agents and `defaults:` (command hooks by event) and the
//!   `treadle_hook::CommandSpec`s they become.
//! * `check_hooks`: the checks of `hooks:` (matchers, commands, timeouts) and their warnings.
//! * `resolve`: before the checks, `tasks:` entries, `*_file:` includes and `defaults:` filled in.
//! * `check_agent`: the checks of the agent keys and of `tasks:`.
//! * `flow_keys`: the control-flow keys (`when`, `to`, `verdicts`, `race`, `across`) and the
//!   cells of an `across:` step.
//! * `ensemble`: `ensemble:` (members, vocabulary, decision rules).
//! * `check_ensemble`: the checks of an `ensemble:` block.
//! * `settings`: `prices:`, `cache:` and the size parser.
//! * `duration`: durations (`90s`, `1h30m`).
//! * `step`: the typed [`Step`] loading makes of a written one, its [`StepKind`] and [`Kind`].
//! * `kind`: what a step's kind says (display name, nested steps) and the keys each kind takes.
//! * `leaf_step`: the payloads of `input:` ([`InputStep`], its question), `get:` and `put:`
//!   ([`GetStep`], [`PutStep`]).
//! * `agent_call`: the keys of an agent step ([`AgentCall`]) and those only a task takes
//!   ([`TaskKeys`]).
//! * `http_step`: the `http:` step's request (its load checks and its part of the key).
//! * `typing`: the conversion of written steps into typed ones (a located error for a step
//!   with no single kind or a key of another), `ensemble:` expanded before it.
//! * `typing_folds`: typing the keys that are one value: the container keys into a
//!   [`container::Container`], `across:` and its dials into a [`flow_keys::Across`].
//! * `typing_agent`: typing an agent step: its agent (and `escalate_to:`, a task's
//!   `fix:`) resolved to a definition of `agents:`, its prompt one [`agent_call::Prompt`].
//! * `load`: reading and parsing with located errors.
//! * `diagnostic`: `FILE:LINE:COL` problems with hints, did-you-mean, and the `Finding`
//!   every check returns.
//! * `check`: the checks before anything runs.
//! * `check_machine`: the checks of this machine `validate` adds (programs on PATH, the
//!   local model server answering).
//! * `walk`: every step of a job, nested and hooks included, and the agents a job uses.
//! * `container`: `image:` and its neighbours, `env:` in both spellings, `workspace:`.
//! * `check_container`: their checks, and `validate`'s warnings about what needs a container.
//! * `check_resource`: the checks of `resource_types:`, resource types and `version:`.
//! * `check_resource_type`: the checks of a resource type's own keys (backend, container
//!   keys, `env:`, `expr:`, `mcp:`) and a resource's `env:`.
//! * `check_flow_keys`: the checks of the control-flow keys (`when`, `to`, `race`, `across`...).
//! * `check_watch`: the checks of what `treadle watch` reads (`passed`, `webhook_token_env`,
//!   job concurrency limits).
//! * `mcp`: the checks and configs of `mcp_servers:`.
//! * `controls`: `permissions:`, `output_schema:`, `min_confidence:`, `escalate_to:`,
//!   `budget: { dollars }`.
//! * `check_controls`: their checks (a dollar budget needs a price) and a model's price names.
//! * `conversation`: `context_window:`, `compact_after_tokens:`, `max_context_bytes:`.
//! * `model`: resolving an agent's model, endpoint and key variable.
//! * `network`: `network:`, what a step's commands may connect to.
//! * `caches`: `caches:`, directories a task keeps across runs or may write in `$HOME`.
//! * `secrets`: the variables holding the file's secrets (every agent's key, used or not),
//!   and their values.
//! * `vars`: `((var))` substitution from `--var` and `--vars-file`.
//! * `resource_type`: `resource_types:`, `defaults:` and a get's `version:`.
//! * `resource_def`: a resource as the file writes it (`resources:`).
//! * `typed_resource`: each resource's type resolved at load ([`ResolvedResource`]: git
//!   and time with their `source:` read, a `resource_types:` entry, or unavailable).
//! * `outline`: every step of a job, numbered (what runs and the state file record).
//!
//! [`load`] is what every command calls: read, parse, check, and either a [`Loaded`]
//! pipeline or a [`LoadError`] listing each problem as `FILE:LINE:COL: what` + `hint:`.

pub mod agent_call;
pub mod agent_def;
pub mod approval_policy;
pub mod artifact;
pub mod at;
pub mod caches;
pub mod check;
pub mod check_agent;
pub mod check_container;
pub mod check_controls;
pub mod check_ensemble;
pub mod check_flow_keys;
pub mod check_hooks;
pub mod check_machine;
pub mod check_resource;
pub mod check_resource_type;
pub mod check_watch;
pub mod container;
pub mod controls;
pub mod conversation;
pub mod defaults;
pub mod delegation;
pub mod diagnostic;
pub mod duration;
pub mod ensemble;
pub mod flow_keys;
pub mod format;
pub mod hook_def;
pub mod http_step;
pub mod in_parallel;
pub mod kind;
pub mod leaf_step;
pub mod load;
pub mod mcp;
pub mod model;
pub use crate::confine::grant as network;
pub mod outline;
pub mod raw_step;
pub mod resolve;
pub mod resource_def;
pub mod resource_type;
pub mod secrets;
pub mod settings;
pub mod step;
pub mod step_keys;
pub mod tool_grant;
pub mod typed_resource;
pub mod typing;
pub mod typing_agent;
mod typing_folds;
pub mod vars;
pub mod walk;

use std::path::{Path, PathBuf};

pub use agent_call::{AgentCall, TaskKeys};
pub use at::{At, Pos};
pub use check::CheckScope;
pub use diagnostic::{Diagnostic, LoadError, Problem};
pub use duration::DurationSpec;
pub use format::{
    Agent, AgentSource, Budget, InParallel, Job, JobAssert, McpServerSpec, Pipeline, RawStep,
    Resource, RunConfig, RunSpec, Step, StepAssert, ToolCallAssert,
};
pub use leaf_step::{GetStep, InputStep, PutStep};
pub use model::ResolvedModel;
pub use resource_type::{Defaults, ResourceType, Version, VersionSpec};
pub use settings::{CacheConfig, ModelPrice, Prices, SizeSpec};
pub use step::{Kind, StepKind};
pub use typed_resource::{ResolvedResource, Resources, TypedResource};

/// The name of the pipeline file commands use when none is given.
pub const DEFAULT_FILE: &str = "treadle.yml";

/// A pipeline that parsed and passed its checks.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file, as given.
    pub file: PathBuf,
    /// The directory holding it (state lives in `.treadle/` there).
    pub dir: PathBuf,
    /// The content.
    pub pipeline: Pipeline,
    /// Its resources, each with its type resolved.
    pub resources: Resources,
}

impl Loaded {
    /// The job to run: the named one, or the only one.
    pub fn job(&self, name: Option<&str>) -> Result<&Job, Diagnostic> {
        let jobs = &self.pipeline.jobs;
        let names = || {
            jobs.iter()
                .map(|j| j.name.value.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => jobs.iter().find(|j| j.name.value == n).ok_or_else(|| {
                Diagnostic::new(
                    &self.file,
                    Pos::default(),
                    Problem::UnknownJob,
                    format!("there is no job `{n}`"),
                    format!("jobs in this file: {}", names()),
                )
            }),
            None if jobs.len() == 1 => Ok(&jobs[0]),
            None => Err(Diagnostic::new(
                &self.file,
                Pos::default(),
                Problem::UnknownJob,
                format!("the file has {} jobs; say which one to run", jobs.len()),
                format!("pass `--job NAME`, one of: {}", names()),
            )),
        }
    }

    /// The agent definition with this name.
    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.pipeline.agents.iter().find(|a| a.name.value == name)
    }
}

/// Reads, parses and checks a pipeline file.
pub fn load(file: &Path, scope: &CheckScope<'_>) -> Result<Loaded, LoadError> {
    load_with_vars(file, scope, &vars::Vars::new())
}

/// [`load`], with each `((name))` that `vars` holds replaced before the file is parsed.
/// A `((name))` left over that no `load_var:` step captures is a load error.
pub fn load_with_vars(
    file: &Path,
    scope: &CheckScope<'_>,
    supplied: &vars::Vars,
) -> Result<Loaded, LoadError> {
    let text = vars::substitute(&load::read_source(file)?, supplied);
    load_text_leaving(file, &text, scope, &std::collections::BTreeSet::new())
}

/// Parses and checks `text` (the content of `file`, vars filled) as [`load_with_vars`]
/// does, except that a `((name))` of the names in `data` is left as written and is not an
/// error: the server fills those in the parsed steps, as data (`crate::server::api_vars`).
pub fn load_text_leaving(
    file: &Path,
    text: &str,
    scope: &CheckScope<'_>,
    data: &std::collections::BTreeSet<String>,
) -> Result<Loaded, LoadError> {
    let mut pipeline = load::parse(file, text)?;
    let mut captured = std::collections::BTreeSet::new();
    let mut capture =
        |s: &mut At<RawStep>| captured.extend(s.load_var.as_ref().map(|v| v.value.clone()));
    for j in &mut pipeline.jobs {
        resolve::walk_job(j, &mut capture);
    }
    resolve::walk(
        pipeline.plan.as_deref_mut().unwrap_or_default(),
        &mut capture,
    );
    let unresolved: Vec<Diagnostic> = vars::uses(text)
        .into_iter()
        .filter(|(name, _)| !captured.contains(name) && !data.contains(name))
        .map(|(name, pos)| {
            Diagnostic::new(
                file,
                pos,
                Problem::MissingKey,
                format!("var `(({name}))` is not supplied"),
                format!("pass `--var {name}=VALUE` (or a `--vars-file`), or capture it with a `load_var: {name}` step"),
            )
        })
        .collect();
    if !unresolved.is_empty() {
        return Err(LoadError(unresolved));
    }
    checked(file, pipeline, scope)
}

/// Parses and checks pipeline text as if read from `file` (which is only named in
/// messages and gives the pipeline's directory).
pub fn load_text(file: &Path, text: &str, scope: &CheckScope<'_>) -> Result<Loaded, LoadError> {
    checked(file, load::parse(file, text)?, scope)
}

fn checked(
    file: &Path,
    mut pipeline: Pipeline<RawStep>,
    scope: &CheckScope<'_>,
) -> Result<Loaded, LoadError> {
    if let Some(plan) = pipeline.plan.take() {
        if !pipeline.jobs.is_empty() {
            return Err(LoadError(vec![Diagnostic::new(
                file,
                Pos::default(),
                Problem::BadStep,
                "the file has both a top-level `plan:` and `jobs:`",
                "move the top-level plan into a job under `jobs:`",
            )]));
        }
        pipeline.jobs.push(Job {
            name: At::new("main".to_owned()),
            plan,
            ..Job::default()
        });
    }
    let unresolved = resolve::resolve(file, &mut pipeline);
    if !unresolved.is_empty() {
        return Err(LoadError(unresolved));
    }
    // A key is a secret for every job: no step passes one on, whatever it names.
    let keys = secrets::key_vars(&pipeline);
    for job in &mut pipeline.jobs {
        resolve::walk_job(job, &mut |step| {
            env_names_to_pass_env(step);
            step.value.pass_env.retain(|name| !keys.contains(name));
        });
    }
    for agent in &mut pipeline.agents {
        agent.env.retain(|name| !keys.contains(&name.value));
    }
    // Before typing: a `get:` or `put:` step holds its resource resolved.
    let dir = dir_of(file);
    let written = (&pipeline.resources[..], &pipeline.resource_types[..]);
    let (resources, bad) = Resources::resolve(file, written, &dir);
    let mut typer = typing::Typer::new(file, resources.clone());
    let Some(pipeline) = typer.pipeline(pipeline) else {
        return Err(LoadError(typer.out));
    };
    let mut problems = typer.out;
    problems.extend(check::check(file, &pipeline, scope));
    problems.extend(bad);
    if !problems.is_empty() {
        return Err(LoadError(problems));
    }
    Ok(Loaded {
        file: file.to_path_buf(),
        dir,
        pipeline,
        resources,
    })
}

/// Moves the names of an `env: [NAME]` list (how `steps` spells it) into `pass_env`, so
/// everything after loading sees one spelling.
fn env_names_to_pass_env(step: &mut At<RawStep>) {
    if let container::Env::Names(names) = &step.env {
        let names = names.clone();
        step.value.pass_env.extend(names);
        step.value.env = container::Env::default();
    }
}

/// The directory a pipeline file is in (`.` for a bare file name).
pub fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The JSON Schema of the pipeline format, for `# yaml-language-server: $schema=...`.
pub fn schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(Pipeline<RawStep>);
    schema.insert("title".to_owned(), "treadle pipeline".into());
    schema.to_value()
}
