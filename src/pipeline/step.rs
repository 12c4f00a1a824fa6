//! The typed step: what loading makes of a written [`RawStep`]. Its kind is one variant
//! of [`StepKind`] holding that kind's own configuration (nested steps typed too), so
//! nothing after loading asks which kind a step is and handles an impossible answer.
//! [`Typer`] is the one conversion; a step with no kind, several, or a key of another
//! kind is a located load error there.

use std::path::Path;

use super::agent_call::{AgentCall, TaskKeys};
use super::at::{At, Pos};
use super::diagnostic::{Diagnostic, Problem};
use super::duration::DurationSpec;
use super::ensemble::Ensemble;
use super::flow::{Axis, Race, To, When};
use super::format::{InParallel, InParallelConfig, Job, Pipeline, RawStep, StepAssert};
use super::kind::StepKind;

/// One loaded step: its kind with the kind's configuration (an agent step's keys in its
/// [`AgentCall`], a task's `fix:` and mappings in its [`TaskKeys`]), and the keys every
/// step takes.
#[derive(Debug, Clone)]
pub struct Step {
    /// The kind and what only that kind has.
    pub kind: StepKind,
    /// What the step is for (for the reader).
    pub description: Option<String>,
    /// A guard command: the step runs only when it exits 0, else it is skipped.
    pub when: Option<At<When>>,
    /// Where the plan goes next after a success or a failure.
    pub to: Option<At<To>>,
    /// Runs the step once per combination of these variables' values.
    pub across: Option<At<Vec<Axis>>>,
    /// With `across:`, how many cells run at once (default 1).
    pub max_in_flight: Option<At<u32>>,
    /// With `across:`, start no further cell once one failed (default false).
    pub fail_fast: Option<bool>,
    /// Step name, when the kind key does not give one (e.g. two steps of the same agent).
    pub name: Option<At<String>>,
    /// Decisions of other steps handed to this one.
    pub context: Option<At<super::step_keys::StepContext>>,
    /// Artifacts this step sees, each as a read-only directory of that name; on a put,
    /// `all`: every artifact produced so far.
    pub inputs: Vec<At<String>>,
    /// Artifacts this step makes: an empty directory each, collected after it succeeds.
    pub outputs: Vec<At<String>>,
    /// Extra environment variables: `{ NAME: value }`; a list of names is read as
    /// `pass_env:` (the spelling of `steps`).
    pub env: super::container::Env,
    /// Variables of treadle's own environment the step's commands inherit besides the
    /// allow-list (API-key variables are never there to pass).
    pub pass_env: Vec<String>,
    /// `false`: the step's commands are not confined to the step directory (a deploy, a
    /// build that reads the project). Default `true`.
    pub confined: Option<bool>,
    /// Kill the step after this long (per attempt).
    pub timeout: Option<At<DurationSpec>>,
    /// Run the step up to this many times until it succeeds (default 1).
    pub attempts: Option<At<u32>>,
    /// How many times a verdict may route the plan back to this step in one run.
    pub max_visits: Option<At<u32>>,
    /// Deterministic checks of what the step did.
    pub assert: Option<At<StepAssert>>,
    /// The container image the step's commands need (treadle has no container runtime:
    /// such a step fails saying so, and `validate` warns).
    pub image: Option<At<String>>,
    /// With `image:`, the container's network (`none`, `host`, `bridge`, a name).
    pub network: Option<At<String>>,
    /// With `image:`, run the container privileged.
    pub privileged: Option<At<bool>>,
    /// With `image:`, the user the container's commands run as.
    pub user: Option<At<String>>,
    /// With `image:`, the container's CPU share and memory cap.
    pub container_limits: Option<At<super::container::ContainerLimits>>,
    /// Never replay this step from the cache (it reads something its key cannot see).
    pub volatile: bool,
    /// Runs after the step succeeded; its failure fails the step.
    pub on_success: Option<Box<At<Step>>>,
    /// Runs after the step failed; the step stays failed.
    pub on_failure: Option<Box<At<Step>>>,
    /// Runs after the step errored (it could not be run); the step stays errored.
    pub on_error: Option<Box<At<Step>>>,
    /// Runs after the run was interrupted during the step.
    pub on_abort: Option<Box<At<Step>>>,
    /// Runs after the step whatever happened; its failure fails the step.
    pub ensure: Option<Box<At<Step>>>,
}

impl super::flow::AcrossStep for Step {
    fn across_axes(&self) -> Option<&At<Vec<Axis>>> {
        self.across.as_ref()
    }
    fn shown_name(&self) -> String {
        self.display_name()
    }
}

impl Step {
    /// An agent step of `call` with no other key set (an ensemble's judge, a task's fixer,
    /// a step built in code).
    pub fn agent(call: AgentCall) -> Self {
        Self::of_kind(StepKind::Agent(Box::new(call)))
    }

    /// A step of `kind` with no other key set.
    pub fn of_kind(kind: StepKind) -> Self {
        Self {
            kind,
            description: None,
            when: None,
            to: None,
            across: None,
            max_in_flight: None,
            fail_fast: None,
            name: None,
            context: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            env: super::container::Env::default(),
            pass_env: Vec::new(),
            confined: None,
            timeout: None,
            attempts: None,
            max_visits: None,
            assert: None,
            image: None,
            network: None,
            privileged: None,
            user: None,
            container_limits: None,
            volatile: false,
            on_success: None,
            on_failure: None,
            on_error: None,
            on_abort: None,
            ensure: None,
        }
    }
}

/// Turns written steps into typed ones, collecting a located diagnostic for each step that
/// has no single kind or carries a key of another kind (loading fails on any).
pub(super) struct Typer<'f> {
    file: &'f Path,
    /// The problems found.
    pub out: Vec<Diagnostic>,
}

const NO_KIND_HINT: &str = "start the step with exactly one of `task: NAME` (with `run:`), `agent: NAME`, `approval: NAME`, `input: NAME`, `get: NAME`, `put: NAME`, `do: [...]`, `in_parallel: [...]`, `try: {...}`, `race: [...]`, `ensemble: {...}`, `load_var: NAME`";

impl<'f> Typer<'f> {
    pub(super) fn new(file: &'f Path) -> Self {
        Self {
            file,
            out: Vec::new(),
        }
    }

    fn push(&mut self, pos: Pos, message: String, hint: String) {
        self.out.push(Diagnostic::new(
            self.file,
            pos,
            Problem::BadStep,
            message,
            hint,
        ));
    }

    /// The typed pipeline (`None` when a step has no single kind; see [`Self::out`]).
    pub(super) fn pipeline(&mut self, raw: Pipeline<RawStep>) -> Option<Pipeline> {
        let jobs: Vec<Option<Job>> = raw.jobs.into_iter().map(|j| self.job(j)).collect();
        let plan = raw.plan.map(|p| self.steps(p));
        Some(Pipeline {
            resources: raw.resources,
            resource_types: raw.resource_types,
            defaults: raw.defaults,
            agents: raw.agents,
            tasks: raw.tasks,
            mcp_servers: raw.mcp_servers,
            jobs: jobs.into_iter().collect::<Option<_>>()?,
            plan: match plan {
                Some(p) => Some(p?),
                None => None,
            },
            prices: raw.prices,
            cache: raw.cache,
            limits: raw.limits,
            workspace: raw.workspace,
            assert: raw.assert,
            on_unfinished_effect: raw.on_unfinished_effect,
        })
    }

    fn job(&mut self, raw: Job<RawStep>) -> Option<Job> {
        let plan = self.steps(raw.plan);
        let [on_success, on_failure, on_error, on_abort, ensure] = [
            raw.on_success,
            raw.on_failure,
            raw.on_error,
            raw.on_abort,
            raw.ensure,
        ]
        .map(|h| self.hook(h));
        Some(Job {
            name: raw.name,
            description: raw.description,
            timeout: raw.timeout,
            plan: plan?,
            assert: raw.assert,
            serial: raw.serial,
            serial_groups: raw.serial_groups,
            max_in_flight: raw.max_in_flight,
            interruptible: raw.interruptible,
            max_consecutive_failures: raw.max_consecutive_failures,
            budget: raw.budget,
            on_success: on_success?,
            on_failure: on_failure?,
            on_error: on_error?,
            on_abort: on_abort?,
            ensure: ensure?,
        })
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
        let [on_success, on_failure, on_error, on_abort, ensure] = [
            raw.on_success.take(),
            raw.on_failure.take(),
            raw.on_error.take(),
            raw.on_abort.take(),
            raw.ensure.take(),
        ]
        .map(|h| self.hook(h));
        let value = Step {
            kind: kind?,
            description: raw.description,
            when: raw.when,
            to: raw.to,
            across: raw.across,
            max_in_flight: raw.max_in_flight,
            fail_fast: raw.fail_fast,
            name: raw.name,
            context: raw.context,
            inputs: raw.inputs,
            outputs: raw.outputs,
            env: raw.env,
            pass_env: raw.pass_env,
            confined: raw.confined,
            timeout: raw.timeout,
            attempts: raw.attempts,
            max_visits: raw.max_visits,
            assert: raw.assert,
            image: raw.image,
            network: raw.network,
            privileged: raw.privileged,
            user: raw.user,
            container_limits: raw.container_limits,
            volatile: raw.volatile,
            on_success: on_success?,
            on_failure: on_failure?,
            on_error: on_error?,
            on_abort: on_abort?,
            ensure: ensure?,
        };
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
            let keys = TaskKeys::take(raw);
            return Some(StepKind::Task { name, run, keys });
        }
        if let Some(a) = raw.agent.take() {
            return Some(StepKind::Agent(Box::new(AgentCall::take(a, raw))));
        }
        if let Some(name) = raw.approval.take() {
            return Some(StepKind::Approval {
                name,
                message: raw.message.take(),
                on_timeout: raw.on_timeout.take(),
            });
        }
        if let Some(name) = raw.input.take() {
            return Some(StepKind::Input {
                name,
                question: raw.question.take(),
                schema: raw.schema.take(),
                choices: raw.choices.take(),
                default: raw.default.take(),
            });
        }
        if let Some(name) = raw.get.take() {
            let resource = raw.resource.take().unwrap_or_else(|| name.clone());
            return Some(StepKind::Get {
                name,
                resource,
                params: raw.params.take(),
                version: raw.version.take(),
                trigger: raw.trigger.take(),
                passed: raw.passed.take(),
            });
        }
        if let Some(name) = raw.put.take() {
            let resource = raw.resource.take().unwrap_or_else(|| name.clone());
            return Some(StepKind::Put {
                name,
                resource,
                params: raw.params.take(),
            });
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
        raw.load_var.take().map(|name| StepKind::LoadVar {
            name,
            file: raw.file.take(),
        })
    }
}
