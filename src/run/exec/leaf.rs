//! The leaf steps: a task (a command) and an agent (handed to the [`AgentRunner`]), each in
//! its own directory, with its asserts checked and its outputs collected.
//!
//! [`AgentRunner`]: crate::run::ports::AgentRunner

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::continued::Unfinished;
use super::forked::Forked;
use super::{Ctx, Done, Status};
use crate::agent::AgentOutcome;
use crate::agent::{AgentStep, BuildError};
use crate::assert::StepFacts;
use crate::pipeline::model::process_env;
use crate::pipeline::outline::Entry;
use crate::pipeline::{AgentCall, RunSpec, Step, TaskKeys};
use crate::run::cell::{Cell, Given};
use crate::run::failure::{FailureKind, StepFailure};
use crate::run::output_limit::OutputLimit;
use crate::run::task::{TaskEnd, TaskResult, TaskSpec, run_task};
use crate::run::transcript::Event;

pub(crate) async fn task<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    entry: &'a Entry,
    attempt: u32,
    (run, keys): (&'a RunSpec, &'a TaskKeys),
    cancel: CancellationToken,
    given: Given<'a>,
) -> Done {
    if attempt == 1 {
        super::continued::say_restarted(ctx, entry).await;
    }
    let dir = match super::step_dir::prepare(ctx, step, entry, attempt).await {
        Ok(d) => d,
        Err(done) => return done,
    };
    if let Err(e) = crate::run::upstream::write_files(&dir, &delivered(ctx, step)) {
        let why = format!("cannot write upstream/ for `context: from`: {e}");
        return Done::fail(FailureKind::Infrastructure, why);
    }
    let extra = task_env(ctx, entry, attempt);
    let network = step_network(ctx, step, None);
    let caches = match task_caches(ctx, step, entry, &dir) {
        Ok(c) => c,
        Err(why) => return Done::fail(FailureKind::Infrastructure, why),
    };
    let spec = TaskSpec {
        run,
        dir: &dir,
        env: &step.env,
        extra_env: &extra,
        pass_env: &step.pass_env,
        confined: step.confined.unwrap_or(true),
        network: &network,
        caches: &caches,
    };
    let (run_id, seq) = (ctx.run, entry.seq);
    let limit = OutputLimit::new(ctx.loaded.pipeline.step_output_limit(), &cancel);
    let on_line = |stream: &'static str, line: String| {
        if limit.take(line.len() + 1) {
            ctx.emit(Event::Output {
                run: run_id,
                seq,
                stream: stream.into(),
                line,
            });
        }
    };
    let mut result = match run_task(&spec, None, &limit.token, &on_line).await {
        Ok(r) => r,
        // The command could not be started: the machinery, not the step, said no.
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    // `fix:`: a command that ended badly (not one that was cancelled) is handed to
    // the fixer, then runs once more; that run decides.
    let failed = ended_badly(&result.end);
    if let (Some(failure), Some(fixer)) = (failed, keys.fix.as_ref()) {
        let output = ctx.transcript.redactor().mask(&result.tail);
        let failed = (run, failure.as_str(), output.as_str());
        if let Err(done) = super::fix::fix(ctx, fixer, entry, &dir, failed, &cancel).await {
            return done;
        }
        result = match run_task(&spec, None, &limit.token, &on_line).await {
            Ok(r) => r,
            Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
        };
    }
    if let Some(reached) = limit.reached() {
        return reached;
    }
    let code = match result.end {
        TaskEnd::Exited(c) => Some(c),
        _ => None,
    };
    let tail = ctx.transcript.redactor().mask(&result.tail);
    let streams = masked_streams(ctx, &result.streams);
    // Written with the step's end (`record::ended`), which follows whatever happens now:
    // a crash before it reruns the step, whose record would not count anyway.
    super::record::change_at(ctx, entry, |r| {
        r.produced.exit_code = code;
        r.produced.stdout_tail = tail;
        r.produced.streams = Some(streams);
    });
    let done = task_end(ctx, step, &result, spec.confined, &dir);
    if !done.is_ok() {
        return done;
    }
    let facts = StepFacts {
        dir: &dir,
        stdout: &result.stdout,
        stderr: &result.stderr,
        code,
        verdict: None,
        tool_calls: &[],
    };
    super::step_dir::conclude(ctx, step, &dir, facts, given.cell).await
}

/// A command's streams as its record keeps them: secrets masked in each.
fn masked_streams(
    ctx: &Ctx<'_>,
    streams: &crate::run::state::Streams,
) -> crate::run::state::Streams {
    let redactor = ctx.transcript.redactor();
    crate::run::state::Streams {
        stdout: redactor.mask(&streams.stdout),
        stderr: redactor.mask(&streams.stderr),
        cut: streams.cut,
    }
}

/// How a command ended badly, in the words the fixer (`fix:`) is given; `None` when it
/// exited 0 or was cancelled.
fn ended_badly(end: &TaskEnd) -> Option<String> {
    match end {
        TaskEnd::Exited(c) => (*c != 0).then(|| format!("exit code {c}")),
        TaskEnd::Signaled(s) => Some(format!("killed by signal {s}")),
        TaskEnd::TimedOut(t) => Some(format!("timed out after {t:?}")),
        TaskEnd::Canceled => None,
    }
}

/// The network a step's commands get: its own `network:`, else its agent's (`agent`),
/// else `defaults:`'s, else none when confined (any when not).
pub(crate) fn step_network(
    ctx: &Ctx<'_>,
    step: &Step,
    agent: Option<&crate::confine::grant::Network>,
) -> crate::confine::grant::Network {
    step.network
        .as_ref()
        .map(|n| &n.value)
        .or(agent)
        .or(ctx
            .loaded
            .pipeline
            .defaults
            .as_ref()
            .and_then(|d| d.network.as_ref())
            .map(|n| &n.value))
        .cloned()
        .unwrap_or_else(|| crate::confine::default_network(step.confined.unwrap_or(true)))
}

/// The directories a task's `caches:` give its command to write, made ready.
fn task_caches(
    ctx: &Ctx<'_>,
    step: &Step,
    entry: &Entry,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    if step.caches.is_empty() {
        return Ok(Vec::new());
    }
    let state_dir = ctx.store.path().parent().unwrap_or(Path::new("."));
    let home = step
        .env
        .get("HOME")
        .cloned()
        .or_else(|| crate::environ::var("HOME"))
        .map(PathBuf::from);
    crate::run::caches::prepare(
        state_dir,
        (&ctx.job.name.value, &entry.name),
        dir,
        home.as_deref(),
        &step.caches,
    )
}

/// What a task's command finds in its environment besides the step's `env:`.
fn task_env(ctx: &Ctx<'_>, entry: &Entry, attempt: u32) -> [(String, String); 4] {
    [
        ("TREADLE_RUN".to_owned(), ctx.run.to_string()),
        ("TREADLE_STEP".to_owned(), entry.name.clone()),
        ("TREADLE_ATTEMPT".to_owned(), attempt.to_string()),
        // How a resume finds this command's processes if treadle dies.
        (
            crate::keeper::MARK.to_owned(),
            crate::keeper::mark(ctx.store.path(), ctx.run),
        ),
    ]
}

/// How a task ended, from how its command ended (before its asserts and outputs).
fn task_end(ctx: &Ctx<'_>, step: &Step, result: &TaskResult, confined: bool, dir: &Path) -> Done {
    let asserts_code = step.assert.as_ref().is_some_and(|a| a.value.code.is_some());
    match result.end {
        TaskEnd::Exited(0) => Done::ok(),
        // `assert: { code }` judges the exit code instead of "zero is success".
        TaskEnd::Exited(_) if asserts_code => Done::ok(),
        TaskEnd::Exited(c) => {
            let confined = confined && crate::confine::unavailable().is_none();
            match crate::confine::denied::hint(
                c,
                &format!("{}\n{}", result.stderr, result.tail),
                dir,
            )
            .filter(|_| confined)
            {
                // Its confinement refused it a path (or a program).
                Some(hint) => Done::fail(FailureKind::Refused, format!("exit code {c}; {hint}")),
                None => Done::fail(FailureKind::ExitStatus, format!("exit code {c}")),
            }
        }
        TaskEnd::Signaled(s) => {
            Done::fail(FailureKind::ExitStatus, format!("killed by signal {s}"))
        }
        TaskEnd::TimedOut(t) => Done::fail(FailureKind::Timeout, format!("timed out after {t:?}")),
        TaskEnd::Canceled => ctx.cancelled(),
    }
}

/// The agent step of `entry` (`step`, whose call is `call`), built from the pipeline the
/// first time it is needed (for its key or to run it) and the same value after.
pub(crate) fn agent_step<'a>(
    ctx: &Ctx<'a>,
    (step, call): (&Step, &AgentCall),
    entry: &Entry,
) -> Result<Arc<AgentStep>, BuildError> {
    if let Some(a) = ctx.state.with(|s| s.agent_steps.get(&entry.seq).cloned()) {
        return Ok(a);
    }
    // Built outside the lock; two cells building at once build the same value and the
    // first one kept is the one every later caller gets.
    let agent = Arc::new(AgentStep::build(ctx.loaded, step, call)?);
    Ok(ctx
        .state
        .with(|s| s.agent_steps.entry(entry.seq).or_insert(agent).clone()))
}

/// The decisions `step` reads (`context: { from }`) from this run's records.
pub(crate) fn delivered<'a>(ctx: &Ctx<'a>, step: &Step) -> Vec<crate::run::upstream::Delivered> {
    ctx.state
        .with(|s| crate::run::upstream::delivered(step, &s.records))
}

/// The agent step as this run gives it: in its directory (`dir:` inside the step
/// directory), with an `across:` cell's values in its prompt, and what it is handed
/// before its first turn (`context_paths:`, `prompt_file: { artifact, path }`).
fn shaped<'a>(
    ctx: &Ctx<'a>,
    built: &AgentStep,
    (step, call): (&Step, &AgentCall),
    dir: &Path,
    given: Given<'_>,
) -> Result<AgentStep, Done> {
    // `dir:` is where the agent works: its tool paths are relative to it.
    let sub = call.dir.as_ref();
    let work = sub.map_or(dir.to_path_buf(), |d| dir.join(&d.value));
    let mut agent_step = built.clone().in_dir(work.clone());
    // A cell of an `across:` step gets its values in its prompt.
    if let Some(cell) = given.cell {
        agent_step.prompt = cell
            .render_text(&agent_step.prompt)
            .map_err(|e| Done::fail(FailureKind::Configuration, format!("prompt: {e}")))?;
    }
    if let Some(text) = given.handed {
        agent_step.prompt = format!("{text}{}", agent_step.prompt);
    }
    let limit = agent_step
        .conversation
        .max_context_bytes
        .unwrap_or(crate::agent::context_files::DEFAULT_CONTEXT_BYTES);
    let delivered = delivered(ctx, step);
    let (context, prompt) =
        crate::run::handing::handed_files(call, dir, &work, given.cell.map(Cell::vars), limit)
            .map_err(|e| Done::failed(e.to_string()))?;
    let before = crate::run::handing::hand_over(&mut agent_step, &delivered, context)
        .map_err(|e| Done::failed(e.to_string()))?;
    agent_step.prompt = format!("{before}{prompt}{}", agent_step.prompt);
    // `assert: files:` is relative to the step directory; the agent works in `dir:`.
    if let Some(sub) = sub {
        agent_step.owed_files = agent_step
            .owed_files
            .iter()
            .map(|f| crate::agent::relative_to_dir(&sub.value, f))
            .collect();
    }
    Ok(agent_step)
}

pub(crate) async fn agent<'a>(
    ctx: &'a Ctx<'a>,
    (step, call): (&'a Step, &'a AgentCall),
    entry: &'a Entry,
    attempt: u32,
    cancel: CancellationToken,
    given: Given<'a>,
) -> Done {
    let built = match agent_step(ctx, (step, call), entry) {
        Ok(a) => a,
        Err(e) => return Done::fail(FailureKind::Configuration, e.to_string()),
    };
    let built = on_picked_source(ctx, call, built);
    // The session reads the key itself; a variable that is not set stops the step here,
    // with the hint, before a directory is made.
    if let Err(e) = built.model.check_key(&process_env) {
        return Done::fail(FailureKind::Configuration, format!("{e} ({})", e.hint()));
    }
    let routes: Vec<(String, String)> = step
        .routes()
        .into_iter()
        .map(|(v, t)| (v.to_owned(), t.value.clone()))
        .collect();
    let (dir, left, forked) = match agent_dir(ctx, step, entry, attempt).await {
        Ok(placed) => placed,
        Err(done) => return done,
    };
    let mut agent_step = match shaped(ctx, &built, (step, call), &dir, given) {
        Ok(a) => a,
        Err(done) => return done,
    };
    agent_step = super::agent_from_run::with_job_limits(ctx, agent_step);
    let at = super::agent_from_run::Placed {
        step,
        entry,
        dir: &dir,
        cancel: &cancel,
    };
    agent_step = super::agent_from_run::controlled(ctx, agent_step, &at, left.as_ref(), forked);
    let request = super::agent_from_run::request(ctx, entry, agent_step, &cancel);
    let outcome = match ctx.agents.run(request).await {
        Ok(o) => o,
        Err(e) => return masked_failure(ctx, e.failure()),
    };
    super::agent_from_run::count_spent(ctx, &outcome);
    record_outcome(ctx, entry, &outcome).await;
    if cancel.is_cancelled() {
        return ctx.cancelled();
    }
    if let Some(f) = super::agent_from_run::failure(&outcome.status) {
        return masked_failure(ctx, f);
    }
    let route = match route(step, &routes, outcome.verdict.as_deref()) {
        Ok(r) => r,
        Err(done) => return done,
    };
    let facts = StepFacts {
        dir: &dir,
        stdout: &outcome.text,
        stderr: "",
        code: None,
        verdict: outcome.verdict.as_deref(),
        tool_calls: &outcome.tool_calls,
    };
    let done = super::step_dir::conclude(ctx, step, &dir, facts, given.cell).await;
    if done.status == Status::Succeeded {
        Done { route, ..done }
    } else {
        done
    }
}

/// The agent step's directory for this attempt, with what it goes on from: the session a
/// run this one resumes left it in mid-way (its directory taken over), or the session of
/// the run this one forks.
async fn agent_dir(
    ctx: &Ctx<'_>,
    step: &Step,
    entry: &Entry,
    attempt: u32,
) -> Result<(PathBuf, Option<Unfinished>, Option<Forked>), Done> {
    let left = match attempt {
        1 => super::continued::unfinished_agent(ctx, entry).await,
        _ => None,
    };
    let forked = match (attempt, &left) {
        (1, None) => super::forked::forked_agent(ctx, entry)
            .await
            .map_err(|why| Done::fail(FailureKind::Infrastructure, why.to_string()))?,
        _ => None,
    };
    let dir = super::step_dir::prepare(ctx, step, entry, attempt).await?;
    if let Some(left) = &left {
        super::continued::take_dir(left, &dir)
            .await
            .map_err(|why| Done::fail(FailureKind::Infrastructure, why.to_string()))?;
        ctx.emit(crate::run::transcript::Event::Notice {
            run: ctx.run,
            text: format!(
                "`{}` interrupted (run {} stopped while it ran): its session {} goes on, with what it committed and the files it wrote",
                entry.name, left.of, left.session
            ),
        });
    } else if attempt == 1 {
        super::continued::say_restarted(ctx, entry).await;
    }
    Ok((dir, left, forked))
}

/// The agent step on the source the pre-run probe picked for its agent (a `fallback:`
/// entry when its primary is down). Which source serves is availability, not content: the
/// key is the primary's.
fn on_picked_source(ctx: &Ctx<'_>, call: &AgentCall, built: Arc<AgentStep>) -> Arc<AgentStep> {
    let picked = ctx.state.with(|s| s.picked.clone());
    if picked.is_empty() {
        return built;
    }
    Arc::new(crate::agent::source_pick::on_picked(
        (*built).clone(),
        &call.agent.value,
        &picked,
    ))
}

/// Keeps what an agent step said in its record (masked): its verdict, note, usage and the
/// tail of its text.
async fn record_outcome(ctx: &Ctx<'_>, entry: &Entry, outcome: &AgentOutcome) {
    let masked = ctx.transcript.redactor().mask(&outcome.text);
    let tail = crate::run::task::record_tail(&masked).to_owned();
    let verdict = outcome.verdict.clone();
    let usage = Some(super::agent_from_run::usage_record(outcome));
    let note = outcome
        .verdict_reason
        .as_ref()
        .map(|n| ctx.transcript.redactor().mask(n));
    super::record::update_at(ctx, entry, |r| {
        r.produced.verdict = verdict;
        r.produced.note = note;
        r.produced.usage = usage;
        r.produced.stdout_tail = tail;
    })
    .await;
}

/// The step failed as `failure` says, its message masked: an endpoint's or a journal's
/// error may quote what the step was given.
fn masked_failure(ctx: &Ctx<'_>, failure: StepFailure) -> Done {
    let masked = ctx.transcript.redactor().mask(&failure.message);
    Done::with(StepFailure::new(failure.kind, masked))
}

/// Where an agent's verdict sends the run: `None` continues in order. A step with routes
/// needs a verdict, and a verdict that is neither routed nor listed fails the step.
fn route(
    step: &Step,
    routes: &[(String, String)],
    verdict: Option<&str>,
) -> Result<Option<String>, Done> {
    if routes.is_empty() {
        return Ok(None);
    }
    let Some(v) = verdict else {
        return Err(Done::fail(
            FailureKind::NoVerdict,
            "the agent gave no verdict",
        ));
    };
    match routes.iter().find(|(name, _)| name == v) {
        Some((_, target)) if target == "next" => Ok(None),
        Some((_, target)) => Ok(Some(target.clone())),
        // A bare verdict records the choice and continues in order.
        None if step.verdict_choices().iter().any(|c| c == v) => Ok(None),
        None => Err(Done::fail(
            FailureKind::NoVerdict,
            format!("the agent gave verdict `{v}`, which is not one of the listed verdicts"),
        )),
    }
}
