//! Shadow runs: `treadle run --shadow RUN [--model NAME | --agent-file FILE]` runs a
//! recorded run's agent steps again, on another model or with other agent definitions, and
//! reports what would change.
//!
//! # How
//!
//! * The recorded run is read from a copy of the state file in a scratch directory, so the
//!   real state file is not opened for writing (nor locked) and a shadow run leaves it as it
//!   was.
//! * Each agent step that ran is built from the pipeline as it is now (with `--agent-file`'s
//!   agents in place of those of the same name), and `--model` replaces its model.
//! * It runs in a scratch directory holding a copy of its inputs (the last version of each
//!   that the recorded run collected) and empty outputs. Its sessions journal in a scratch
//!   journal.
//! * A tool call whose name and arguments equal a recorded call of that step is answered with
//!   the recorded result ([`replay`]); any other call runs the real tool, confined to the
//!   scratch directory (a matching file write is made there too, for the asserts). Nobody
//!   is asked anything: a `permissions:` `ask` and an escalation to
//!   a person are refused, as in a run nobody can answer.
//! * Per step the report gives the first tool call that differs (the verdict call left out),
//!   the verdict before and after, the step's `assert:` checks that fail now, and tokens and
//!   cost before and after ([`report`]).
//!
//! The scratch directory is removed at the end. Nothing outside it is written.
//!
//! `treadle serve` runs the same shadow (`POST /api/v1/runs/{id}/shadow`,
//! [`shadow_in_store`]): it reads the recorded run from the state file it owns instead of a
//! copy, and keeps the report with each step's calls ([`Traced`]) in its own table
//! ([`kept`]) for the comparison page. A shadow is still not a run.
//!
//! # Layout
//!
//! * `replay`: the tools that answer from the recording.
//! * [`report`]: [`ShadowReport`], its text and JSON forms, and the first difference.
//! * [`kept`]: the shadows a server ran, kept in the state file (`shadows.v1`).

pub mod kept;
mod replay;
pub mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentStep, Quiet, RecordedCall, run_agent_step};
use crate::pipeline::{Agent, AgentCall, AgentSource, At, Job, Loaded, Step, StepKind};
use crate::run::FailureKind;
use crate::run::state::{RunRecord, StateError, StepRecord, StepStatus, Store};
pub use kept::{StepTrace, Traced};
pub use report::{ShadowReport, StepReport};

/// What to shadow, and against what.
#[derive(Debug, Clone, Default)]
pub struct ShadowOptions {
    /// The recorded run.
    pub run: u64,
    /// The state file (default: `.treadle/state.redb` beside the pipeline).
    pub state: Option<PathBuf>,
    /// The model every agent step runs on instead (`provider/model`).
    pub model: Option<String>,
    /// A YAML file with a list of agents that replace the pipeline's agents of the same name.
    pub agent_file: Option<PathBuf>,
}

/// Why a shadow run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ShadowError {
    /// The state file could not be copied or read.
    #[error("cannot read the recorded run from {}: {reason}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The scratch directory could not be made or filled.
    #[error("cannot prepare the scratch directory {}: {reason}", path.display())]
    Scratch {
        /// Where.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The run's job is not in the pipeline any more.
    #[error("run {run} ran job `{job}`, which this pipeline no longer has")]
    Job {
        /// The run.
        run: u64,
        /// Its job.
        job: String,
    },
    /// `--agent-file` is unusable.
    #[error("{}: {reason} (hint: give a YAML list of agents, as under `agents:`)", path.display())]
    AgentFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--model` does not resolve, or an agent step cannot be built.
    #[error("{0}")]
    Build(String),
    /// An agent step could not run at all.
    #[error("agent step `{step}`: {reason}")]
    Agent {
        /// The step.
        step: String,
        /// Why.
        reason: String,
    },
}

impl ShadowError {
    /// The kind of failure it is, as a shadow's record keeps it beside the message.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::State { .. } | Self::Scratch { .. } | Self::Agent { .. } => {
                FailureKind::Infrastructure
            }
            Self::Job { .. } | Self::AgentFile { .. } | Self::Build(_) => {
                FailureKind::Configuration
            }
        }
    }
}

/// Runs the shadow of `options.run` and reports what changed.
pub async fn shadow(loaded: &Loaded, options: &ShadowOptions) -> Result<ShadowReport, ShadowError> {
    let state_path = crate::run::state_path(&loaded.file, options.state.clone());
    let scratch = Scratch::new()?;
    let result = match read_run(&state_path, &scratch.0, options.run).await {
        Ok(recorded) => shadow_in(loaded, options, recorded, &state_path, &scratch.0).await,
        Err(e) => Err(e),
    };
    drop(scratch);
    result.map(|traced| traced.report)
}

/// The shadow of `options.run` as a server that owns the state file runs it: the recorded
/// run is read from `store` itself (the server's open state file cannot be copied whole
/// while it writes), and each step's calls and time come back with the report.
pub async fn shadow_in_store(
    loaded: &Loaded,
    options: &ShadowOptions,
    store: Arc<Store>,
) -> Result<Traced, ShadowError> {
    let state_path = store.path().to_path_buf();
    let run = options.run;
    let recorded = crate::blocking::blocking(move || recorded_from(&store, run))
        .await
        .map_err(|e| ShadowError::State {
            path: state_path.clone(),
            reason: e.to_string(),
        })?;
    let scratch = Scratch::new()?;
    let result = shadow_in(loaded, options, recorded, &state_path, &scratch.0).await;
    drop(scratch);
    result
}

/// Whether `options` can be shadowed at all (its `--model` resolves), before anything runs.
pub fn check(options: &ShadowOptions) -> Result<(), ShadowError> {
    match &options.model {
        Some(model) => resolve_model(model).map(|_| ()),
        None => Ok(()),
    }
}

async fn shadow_in(
    loaded: &Loaded,
    options: &ShadowOptions,
    recorded: Recorded,
    state_path: &Path,
    scratch: &Path,
) -> Result<Traced, ShadowError> {
    let mut loaded = loaded.clone();
    if let Some(file) = &options.agent_file {
        replace_agents(&mut loaded, file)?;
    }
    let job = loaded
        .pipeline
        .jobs
        .iter()
        .find(|j| j.name.value == recorded.run.job)
        .ok_or_else(|| ShadowError::Job {
            run: options.run,
            job: recorded.run.job.clone(),
        })?;
    let journal_path = scratch.join("journal.redb");
    let journal =
        treadle_session::Journal::open(&journal_path).map_err(|e| ShadowError::Scratch {
            path: journal_path.clone(),
            reason: e.to_string(),
        })?;
    let artifacts = state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("runs")
        .join(options.run.to_string())
        .join("artifacts");
    let mut steps = Vec::new();
    let mut traces = Vec::new();
    for (record, calls) in &recorded.agent_steps {
        // A step the file no longer has, or no longer as an agent step, has no shadow.
        let Some((step, call)) = find_step(job, &record.name) else {
            continue;
        };
        let dir = scratch.join("steps").join(record.seq.to_string());
        prepare(&dir, step, &artifacts)?;
        let context = StepContext {
            loaded: &loaded,
            step,
            call,
            record,
            calls,
            dir,
        };
        let began = std::time::Instant::now();
        let (step, calls) = shadow_step(&context, options, &journal).await?;
        traces.push(StepTrace {
            seq: record.seq,
            calls,
            duration_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        steps.push(step);
    }
    Ok(Traced {
        report: ShadowReport {
            run: options.run,
            job: recorded.run.job,
            steps,
        },
        traces,
    })
}

/// One recorded agent step and where its shadow runs.
struct StepContext<'a> {
    loaded: &'a Loaded,
    step: &'a Step,
    call: &'a crate::pipeline::AgentCall,
    record: &'a StepRecord,
    calls: &'a [RecordedCall],
    dir: PathBuf,
}

async fn shadow_step(
    context: &StepContext<'_>,
    options: &ShadowOptions,
    journal: &treadle_session::Journal,
) -> Result<(StepReport, Vec<report::Call>), ShadowError> {
    let name = context.record.name.clone();
    let mut agent = AgentStep::build(context.loaded, context.step, context.call)
        .map_err(|e| ShadowError::Build(format!("agent step `{name}`: {e}")))?
        .in_dir(context.dir.clone());
    if let Some(model) = &options.model {
        agent.model = resolve_model(model)?;
    }
    agent
        .model
        .check_key(&crate::pipeline::model::process_env)
        .map_err(|e| ShadowError::Build(format!("{e} ({})", e.hint())))?;
    let recording = Arc::new(replay::Recording::new(context.calls.to_vec()));
    let shared = recording.clone();
    agent.controls.asker = None;
    agent.controls.wrap_tools = Some(Arc::new(move |tools| replay::wrap(tools, &shared)));
    let outcome = run_agent_step(&agent, journal, &Quiet, &CancellationToken::new())
        .await
        .map_err(|e| ShadowError::Agent {
            step: name.clone(),
            reason: e.to_string(),
        })?;
    let failing_asserts = match &context.step.assert {
        Some(spec) => crate::assert::check_step(
            &spec.value,
            &crate::assert::StepFacts {
                dir: &context.dir,
                stdout: &outcome.text,
                stderr: "",
                code: None,
                verdict: outcome.verdict.as_deref(),
                tool_calls: &outcome.tool_calls,
            },
        )
        .iter()
        .map(ToString::to_string)
        .collect(),
        None => Vec::new(),
    };
    let (replayed_calls, live_calls) = recording.counts();
    let original_verdict = context.record.produced.verdict.clone();
    let calls = report::calls_of(&outcome.tool_calls);
    let step = StepReport {
        seq: context.record.seq,
        name,
        model: outcome.model.clone(),
        first_difference: report::first_difference(context.calls, &outcome.tool_calls),
        verdict_changed: original_verdict != outcome.verdict,
        original_verdict,
        shadow_verdict: outcome.verdict.clone(),
        failing_asserts,
        failure: outcome.status.error(),
        replayed_calls,
        live_calls,
        original: spend_of(context.record.produced.usage.as_ref()),
        shadow: report::Spend {
            tokens: outcome.usage.total(),
            usd: outcome.cost.usd(),
        },
    };
    Ok((step, calls))
}

/// What the state file recorded of a run: the run, and each agent step that ran with its
/// tool calls.
struct Recorded {
    run: RunRecord,
    agent_steps: Vec<(StepRecord, Vec<RecordedCall>)>,
}

/// Reads the run from a copy of the state file in `scratch` (see the module docs).
async fn read_run(state: &Path, scratch: &Path, run: u64) -> Result<Recorded, ShadowError> {
    let copy = scratch.join("state.redb");
    let error = |reason: String| ShadowError::State {
        path: state.to_path_buf(),
        reason,
    };
    std::fs::copy(state, &copy).map_err(|e| error(e.to_string()))?;
    let read = crate::blocking::blocking(move || -> Result<Recorded, ReadRun> {
        let store = Store::open(&copy)?;
        recorded_from(&store, run)
    });
    read.await.map_err(|e| error(e.to_string()))
}

/// Why the copy of the state file did not give the run.
#[derive(Debug, thiserror::Error)]
enum ReadRun {
    /// The copy cannot be read.
    #[error("{0}")]
    State(#[from] StateError),
    /// The reading task ended without returning.
    #[error(transparent)]
    Stopped(#[from] crate::blocking::WorkerStopped),
    /// It holds no such run.
    #[error("there is no run {run}: {source}")]
    NoRun {
        /// The run asked for.
        run: u64,
        /// Why.
        source: StateError,
    },
}

/// What `store` recorded of `run` (see [`Recorded`]).
fn recorded_from(store: &Store, run: u64) -> Result<Recorded, ReadRun> {
    let record = store
        .run(run)
        .map_err(|source| ReadRun::NoRun { run, source })?;
    let mut agent_steps = Vec::new();
    for step in store.steps(run)? {
        if step.kind != "agent" || matches!(step.status, StepStatus::Skipped | StepStatus::Pending)
        {
            continue;
        }
        // A step replayed from the cache was recorded by the run it came from.
        let source = step.cached_from.unwrap_or(run);
        let calls = store
            .agent_events(source, step.seq)?
            .into_iter()
            .filter(|e| e["what"] == "tool_call")
            .filter_map(|e| serde_json::from_value(e["data"].clone()).ok())
            .collect();
        agent_steps.push((step, calls));
    }
    Ok(Recorded {
        run: record,
        agent_steps,
    })
}

/// The tokens and cost a step's record holds.
fn spend_of(usage: Option<&serde_json::Value>) -> report::Spend {
    let Some(usage) = usage else {
        return report::Spend::default();
    };
    let tokens = ["prompt_tokens", "completion_tokens"]
        .iter()
        .filter_map(|k| usage[*k].as_u64())
        .sum();
    report::Spend {
        tokens,
        usd: usage["cost"]["usd"].as_f64(),
    }
}

/// The agent step of `job` recorded under `name`, with its call.
fn find_step<'j>(job: &'j Job, name: &str) -> Option<(&'j Step, &'j AgentCall)> {
    job_steps(job).into_iter().find_map(|s| match &s.kind {
        StepKind::Agent(call) if s.display_name() == name => Some((s, call.as_ref())),
        _ => None,
    })
}

/// Every step of a job (nested and hooks included), in file order.
fn job_steps(job: &Job) -> Vec<&Step> {
    fn walk<'s>(step: &'s At<Step>, out: &mut Vec<&'s Step>) {
        out.push(&step.value);
        for s in step.children() {
            walk(s, out);
        }
        for (_, hook) in step.hooks() {
            walk(hook, out);
        }
    }
    let mut out = Vec::new();
    for step in job.plan.iter().chain(job.hooks().map(|(_, h)| h)) {
        walk(step, &mut out);
    }
    out
}

/// Makes the step's scratch directory: its inputs copied from the recorded run's artifacts,
/// its outputs empty.
fn prepare(dir: &Path, step: &Step, artifacts: &Path) -> Result<(), ShadowError> {
    let error = |reason: String| ShadowError::Scratch {
        path: dir.to_path_buf(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| error(e.to_string()))?;
    for input in &step.inputs {
        let also_output = step.outputs.iter().any(|o| o.value == input.value);
        // An input the run no longer has (its directory was pruned) is left out; the step's
        // calls that read it are answered from the recording anyway.
        if let Some(src) = last_version(artifacts, &input.value, also_output) {
            crate::run::artifacts::copy_tree(&src, &dir.join(&input.value), also_output)
                .map_err(|e| error(e.to_string()))?;
        }
    }
    for output in &step.outputs {
        let path = dir.join(&output.value);
        std::fs::create_dir_all(&path).map_err(|e| error(e.to_string()))?;
    }
    Ok(())
}

/// The last collected version of artifact `name` (`NAME.N`, highest N); when the step also
/// outputs it, the one before (the version it read).
fn last_version(artifacts: &Path, name: &str, also_output: bool) -> Option<PathBuf> {
    let mut versions: Vec<u64> = std::fs::read_dir(artifacts)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let (base, version) = file.rsplit_once('.')?;
            (base == name).then(|| version.parse().ok()).flatten()
        })
        .collect();
    versions.sort_unstable();
    if also_output && versions.len() > 1 {
        versions.pop();
    }
    versions
        .last()
        .map(|v| artifacts.join(format!("{name}.{v}")))
}

/// `--model NAME`: resolved like an agent's `source: { model: NAME }`.
fn resolve_model(name: &str) -> Result<crate::pipeline::ResolvedModel, ShadowError> {
    let source = AgentSource {
        model: Some(At::new(name.to_owned())),
        ..AgentSource::default()
    };
    crate::pipeline::model::resolve(
        &source,
        crate::pipeline::Pos::default(),
        &crate::pipeline::model::process_env,
    )
    .map_err(|e| ShadowError::Build(format!("--model {name}: {e} ({})", e.hint())))
}

/// `--agent-file`: each agent in it replaces the pipeline's agent of the same name.
fn replace_agents(loaded: &mut Loaded, file: &Path) -> Result<(), ShadowError> {
    let error = |reason: String| ShadowError::AgentFile {
        path: file.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| error(e.to_string()))?;
    let agents: Vec<Agent> = serde_saphyr::from_str(&text).map_err(|e| error(e.to_string()))?;
    for agent in agents {
        match loaded
            .pipeline
            .agents
            .iter_mut()
            .find(|a| a.name.value == agent.name.value)
        {
            Some(slot) => *slot = agent,
            None => {
                return Err(error(format!(
                    "agent `{}` is not in the pipeline",
                    agent.name.value
                )));
            }
        }
    }
    Ok(())
}

/// A scratch directory under the system's temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, ShadowError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("treadle-shadow-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| ShadowError::Scratch {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover scratch directory costs disk, not correctness.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
