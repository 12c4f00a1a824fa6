//! Typing a written pipeline: [`Typer`] turns each [`RawStep`] into a typed
//! [`super::step::Step`] (a step with no kind, several, or a key of another kind is a
//! located load error); the keys of an agent or task step are taken out of it (the agent
//! it names resolved to its definition, its prompt made one [`super::agent_call::Prompt`]: see
//! [`super::typing_agent`]), and an `ensemble:` is expanded before its members are typed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::agent_call::TaskKeys;
use super::agent_def::Agent;
use super::at::{At, Pos};
use super::diagnostic::{Diagnostic, Problem};
use super::ensemble::{Ensemble, Rule};
use super::flow_keys::Race;
use super::format::{Job, Pipeline};
use super::in_parallel::{InParallel, InParallelConfig};
use super::leaf_step::{GetStep, InputStep, PutStep};
use super::raw_step::RawStep;
use super::step::{Outcomes, Step, StepKind};
use super::typed_resource::{Resources, TypedResource};

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

/// Turns written steps into typed ones, collecting a located diagnostic for each step that
/// has no single kind or carries a key of another kind (loading fails on any).
pub(super) struct Typer<'f> {
    pub(super) file: &'f Path,
    /// The definitions of `agents:` by name, each shared by the steps that name it.
    pub(super) agents: BTreeMap<String, Arc<Agent>>,
    /// Their names in the file's order (for the hint of an unknown one).
    pub(super) known: Vec<String>,
    /// The file's resources, each with its type resolved (`get:` and `put:` steps hold
    /// theirs).
    pub(super) resources: Resources,
    /// The problems found.
    pub out: Vec<Diagnostic>,
}

const NO_KIND_HINT: &str = "start the step with exactly one of `task: NAME` (with `run:`), `agent: NAME`, `approval: NAME`, `input: NAME`, `get: NAME`, `put: NAME`, `do: [...]`, `in_parallel: [...]`, `try: {...}`, `race: [...]`, `ensemble: {...}`, `load_var: NAME`, `http: NAME` (with `url:`)";

impl<'f> Typer<'f> {
    pub(super) fn new(file: &'f Path, resources: Resources) -> Self {
        Self {
            file,
            agents: BTreeMap::new(),
            known: Vec::new(),
            resources,
            out: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, pos: Pos, message: String, hint: String) {
        self.out.push(Diagnostic::new(
            self.file,
            pos,
            Problem::BadStep,
            message,
            hint,
        ));
    }

    /// The typed pipeline (`None` when a step has no single kind; see [`Self::out`]).
    pub(super) fn pipeline(&mut self, mut raw: Pipeline<RawStep>) -> Option<Pipeline> {
        self.known = raw.agents.iter().map(|a| a.name.value.clone()).collect();
        // Before the definitions are shared, so that each step's holds its sub-agents. An
        // unknown one is reported by the checks (`check_agent`), with its parent's name.
        super::delegation::resolve(&mut raw.agents);
        self.agents = raw
            .agents
            .iter()
            .map(|a| (a.name.value.clone(), Arc::new(a.clone())))
            .collect();
        let jobs = std::mem::take(&mut raw.jobs);
        let jobs: Vec<Option<Job>> = jobs.into_iter().map(|j| self.job(j)).collect();
        let plan = match raw.plan.take() {
            Some(p) => Some(self.steps(p)?),
            None => None,
        };
        Some(raw.with_jobs(jobs.into_iter().collect::<Option<_>>()?, plan))
    }

    fn job(&mut self, mut raw: Job<RawStep>) -> Option<Job> {
        let (plan, outcome) = raw.take_steps();
        let plan = self.steps(plan);
        let [on_success, on_failure, on_error, on_abort, ensure] = outcome.map(|h| self.hook(h));
        Some(raw.with_steps(
            plan?,
            [on_success?, on_failure?, on_error?, on_abort?, ensure?],
        ))
    }

    /// Every step typed (all are tried, so that each problem is reported).
    fn steps(&mut self, raw: Vec<At<RawStep>>) -> Option<Vec<At<Step>>> {
        let typed: Vec<Option<At<Step>>> = raw.into_iter().map(|s| self.step(s)).collect();
        typed.into_iter().collect()
    }

    /// A hook typed: `Some(None)` when there is none, `None` when it could not be typed.
    fn hook(&mut self, raw: Option<Box<At<RawStep>>>) -> Option<Option<Box<At<Step>>>> {
        match raw {
            Some(h) => self.step(*h).map(|h| Some(Box::new(h))),
            None => Some(None),
        }
    }

    /// One step typed, nested steps and hooks included.
    pub(super) fn step(&mut self, raw: At<RawStep>) -> Option<At<Step>> {
        let At {
            value: mut raw,
            pos,
        } = raw;
        let keys = raw.kind_keys();
        let key = match keys.as_slice() {
            [one] => *one,
            [] => {
                let e = super::kind::KindError::None;
                self.push(pos, e.to_string(), NO_KIND_HINT.to_owned());
                return None;
            }
            _ => {
                let e = super::kind::KindError::Several(keys.join(", "));
                self.push(pos, e.to_string(), NO_KIND_HINT.to_owned());
                return None;
            }
        };
        if let (Some(name), None) = (&raw.task, &raw.run) {
            let e = super::kind::KindError::TaskWithoutRun(name.value.clone());
            self.push(pos, e.to_string(), NO_KIND_HINT.to_owned());
            return None;
        }
        // A key of another kind is reported, and the step is typed all the same, so that
        // the checks after typing report the rest of the file's problems with it.
        for (k, kinds, at) in raw.specific_keys() {
            if !kinds.contains(&key) {
                self.push(
                    at.unwrap_or(pos),
                    format!("`{k}` does not belong on a `{key}` step"),
                    format!(
                        "`{k}` is a key of {} steps; remove it here",
                        kinds.join("/")
                    ),
                );
            }
        }
        let misplaced = raw.misplaced(key);
        let kind = self.kind(&mut raw);
        let container = self.container(&mut raw, key);
        let across = self.across(&mut raw, pos);
        let [on_success, on_failure, on_error, on_abort, ensure] = [
            raw.on_success.take(),
            raw.on_failure.take(),
            raw.on_error.take(),
            raw.on_abort.take(),
            raw.ensure.take(),
        ]
        .map(|h| self.hook(h));
        let mut value = Step {
            kind: kind?,
            description: raw.description,
            when: raw.when,
            to: raw.to,
            across,
            name: raw.name,
            context: raw.context,
            inputs: raw.inputs,
            outputs: raw.outputs,
            env: raw.env,
            pass_env: raw.pass_env,
            caches: raw.caches,
            confined: raw.confined,
            timeout: raw.timeout,
            attempts: raw.attempts,
            max_visits: raw.max_visits,
            assert: raw.assert,
            container,
            network: raw.network,
            volatile: raw.volatile,
            keep_on_failure: raw.keep_on_failure,
            outcomes: Outcomes {
                on_success: on_success?,
                on_failure: on_failure?,
                on_error: on_error?,
                on_abort: on_abort?,
                ensure: ensure?,
            },
        };
        if let StepKind::Http { call, .. } = &value.kind {
            call.add_output(&mut value.outputs);
        }
        // Reported once the name is known; the key itself is dropped with the raw step.
        let name = value.display_name();
        for m in misplaced {
            self.push(
                m.pos.unwrap_or(pos),
                format!("`{}:` does not apply to step `{name}`", m.key),
                format!("`{}:` belongs to {}; remove it here", m.key, m.kinds),
            );
        }
        Some(At { value, pos })
    }

    /// Takes the kind key (exactly one is present) and its configuration out of `raw`.
    fn kind(&mut self, raw: &mut RawStep) -> Option<StepKind> {
        if let (Some(name), Some(run)) = (raw.task.take(), raw.run.take()) {
            let shown = raw.name.as_ref().unwrap_or(&name).value.clone();
            let fix = raw.fix.take().map(|f| self.fixer(f, &shown));
            let keys = TaskKeys::take(fix, raw);
            return Some(StepKind::Task { name, run, keys });
        }
        if let Some(a) = raw.agent.take() {
            return Some(StepKind::Agent(Box::new(self.agent_call(a, raw))));
        }
        if let Some(name) = raw.approval.take() {
            let policy = super::approval_policy::ApprovalPolicy::of(&name.value);
            return Some(StepKind::Approval {
                name,
                message: raw.message.take(),
                on_timeout: raw.on_timeout.take(),
                policy,
            });
        }
        if let Some(name) = raw.input.take() {
            return Some(StepKind::Input(InputStep {
                name,
                question: raw.question.take(),
                schema: raw.schema.take(),
                choices: raw.choices.take(),
                default: raw.default.take(),
            }));
        }
        if let Some(name) = raw.get.take() {
            let resource = raw.resource.take().unwrap_or_else(|| name.clone());
            return Some(StepKind::Get(GetStep {
                typed: self.resource(&resource),
                name,
                resource,
                params: raw.params.take(),
                version: raw.version.take(),
                trigger: raw.trigger.take(),
                passed: raw.passed.take(),
            }));
        }
        if let Some(name) = raw.put.take() {
            let resource = raw.resource.take().unwrap_or_else(|| name.clone());
            return Some(StepKind::Put(PutStep {
                typed: self.resource(&resource),
                name,
                resource,
                params: raw.params.take(),
            }));
        }
        if let Some(steps) = raw.do_.take() {
            return self.steps(steps).map(StepKind::Do);
        }
        if let Some(p) = raw.in_parallel.take() {
            return match p {
                InParallel::Steps(s) => self.steps(s).map(InParallel::Steps),
                InParallel::Config(c) => self.steps(c.steps).map(|steps| {
                    InParallel::Config(InParallelConfig {
                        steps,
                        limit: c.limit,
                        fail_fast: c.fail_fast,
                    })
                }),
            }
            .map(StepKind::InParallel);
        }
        if let Some(inner) = raw.try_.take() {
            return self.step(*inner).map(|s| StepKind::Try(Box::new(s)));
        }
        if let Some(r) = raw.race.take() {
            return self
                .steps(r.steps)
                .map(|steps| StepKind::Race(Race { steps }));
        }
        if let Some(e) = raw.ensemble.take() {
            let At { value: e, pos } = e;
            let agents = self.steps(e.agents);
            let judge = self.hook(e.judge);
            return Some(StepKind::Ensemble(At {
                value: Ensemble {
                    verdicts: e.verdicts,
                    decide: e.decide,
                    member_errors: e.member_errors,
                    agents: agents?,
                    judge: judge?,
                },
                pos,
            }));
        }
        if let Some(name) = raw.http.take() {
            return self.http(name, raw);
        }
        raw.load_var.take().map(|name| StepKind::LoadVar {
            name,
            file: raw.file.take(),
        })
    }

    /// The resource `name` names, as resolved at load. A name that did not resolve is
    /// reported elsewhere (an unknown name by the checks, `check::check`; an unknown type
    /// by `check_resource`; a bad `source:` by [`Resources::resolve`]) and typed as an
    /// unavailable stand-in so that the rest of the file is checked; loading fails on the
    /// report, so no step holding the stand-in runs.
    fn resource(&self, name: &At<String>) -> Arc<TypedResource> {
        self.resources.get(&name.value).cloned().unwrap_or_else(|| {
            Arc::new(TypedResource {
                spec: super::format::Resource {
                    name: name.clone(),
                    kind: At::new(String::new()),
                    source: Default::default(),
                    webhook_token_env: None,
                    env: Vec::new(),
                },
                kind: super::typed_resource::ResolvedResource::Unavailable,
            })
        })
    }

    /// An `http:` step's request, checked (a bad URL or method is a located error).
    fn http(&mut self, name: At<String>, raw: &mut RawStep) -> Option<StepKind> {
        let Some(url) = raw.url.take() else {
            let e = super::http_step::HttpKeyError::NoUrl(name.value.clone());
            let hint = "add `url: https://...` to the step".to_owned();
            self.push(name.pos, e.to_string(), hint);
            return None;
        };
        let method = raw.method.take().map(|m| At {
            value: m.value.to_ascii_uppercase(),
            pos: m.pos,
        });
        let call = super::http_step::HttpCall {
            url,
            method: method.unwrap_or_else(|| At {
                value: "GET".to_owned(),
                pos: name.pos,
            }),
            headers: raw.headers.take().unwrap_or_default(),
            secret_headers: raw.secret_headers.take().unwrap_or_default(),
            body: raw.body.take(),
            expect: raw.expect.take().unwrap_or_default(),
            follow_redirects: raw.follow_redirects.take().unwrap_or(true),
            output: raw.output.take(),
        };
        if let Some((pos, e)) = call.problem() {
            let hint = "write an http(s) URL and a method such as GET or POST".to_owned();
            self.push(pos, e.to_string(), hint);
            return None;
        }
        for (header, var) in &call.secret_headers {
            // Read here only to judge its length; the value is never kept.
            let short = std::env::var(var)
                .ok()
                .and_then(|v| super::http_step::too_short(&v));
            if let Some(why) = short {
                let e = format!("secret header `{header}`: the variable `{var}` {why}");
                let hint = format!(
                    "give `{var}` a secret of at least {} characters (a real token is longer), \
                     or send the value in `headers:` if it is no secret",
                    treadle_session::Secrets::MIN_LEN
                );
                self.push(name.pos, e, hint);
                return None;
            }
        }
        Some(StepKind::Http {
            name,
            call: Box::new(call),
        })
    }
}
