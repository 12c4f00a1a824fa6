//! The leaf steps: a task (a command) and an agent (handed to the [`AgentRunner`]), each in
//! its own directory, with its asserts checked and its outputs collected.
//!
//! [`AgentRunner`]: super::ports::AgentRunner

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::artifacts::ArtifactError;
use super::cell::{Cell, Given};
use super::exec::{Ctx, Done, Status};
use super::output_limit::OutputLimit;
use super::ports::{AgentStepError, AgentStepRequest, StepReporter};
use super::task::{TaskEnd, TaskSpec, run_task};
use super::transcript::Event;
use crate::agent::AgentStep;
use crate::assert::{self, StepFacts};
use crate::pipeline::model::process_env;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, RunSpec, Step};

fn names(list: &[At<String>]) -> Vec<String> {
    list.iter().map(|s| s.value.clone()).collect()
}

impl<'a> Ctx<'a> {
    pub(crate) async fn prepare(
        &self,
        step: &Step,
        entry: &Entry,
        attempt: u32,
    ) -> Result<PathBuf, Done> {
        let (inputs, outputs) = (names(&step.inputs), names(&step.outputs));
        // Cells of one step share its number; their index keeps their directories apart.
        let name = match entry.cell {
            Some(cell) => format!("c{cell}-{}", entry.name),
            None => entry.name.clone(),
        };
        let (ws, seq) = (self.artifacts.clone(), entry.seq);
        let result =
            tokio::task::spawn_blocking(move || ws.prepare(seq, &name, attempt, &inputs, &outputs))
                .await
                .unwrap_or_else(|e| {
                    Err(ArtifactError::Io {
                        what: "cannot prepare",
                        path: PathBuf::new(),
                        source: std::io::Error::other(e.to_string()),
                    })
                });
        // A mapped artifact is shown under the name the command uses.
        let result = result.and_then(|dir| {
            remount(&dir, &step.mounts(), false)?;
            Ok(dir)
        });
        result.map_err(|e| match e {
            ArtifactError::MissingInput(_)
            | ArtifactError::MissingOutput(_)
            | ArtifactError::ReplacedOutput(_) => Done::failed(e.to_string()),
            ArtifactError::Io { .. } | ArtifactError::BadName { .. } => {
                Done::errored(e.to_string())
            }
        })
    }

    /// Checks asserts, then collects outputs; the directory is removed when all went well.
    pub(crate) async fn conclude(
        &self,
        step: &Step,
        dir: &Path,
        facts: StepFacts<'_>,
        cell: Option<&Cell>,
    ) -> Done {
        if let Some(assert) = &step.assert {
            let failures = assert::check_step(&assert.value, &facts);
            if !failures.is_empty() {
                return Done::asserts_failed("assert", failures);
            }
        }
        let outputs = names(&step.outputs);
        if let Err(e) = remount(dir, &step.mounts(), true) {
            return Done::errored(e.to_string());
        }
        let (ws, owned) = (self.artifacts.clone(), dir.to_path_buf());
        // A cell of an `across:` step collects into its place in the block's artifact.
        let cell = cell
            .filter(|_| !outputs.is_empty())
            .map(|c| c.segments().to_vec());
        let collected = tokio::task::spawn_blocking(move || match cell {
            Some(segments) => ws.collect_cell(&owned, &outputs, &segments),
            None => ws.collect(&owned, &outputs),
        })
        .await
        .unwrap_or_else(|e| {
            Err(ArtifactError::Io {
                what: "cannot collect",
                path: dir.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })
        });
        match collected {
            Ok(()) => {
                // An agent step's directory stays until the run has ended: until its
                // record says it succeeded (a durable write after this), a process stopped
                // here goes on in its session, in that directory (`continued`).
                if !matches!(&step.kind, crate::pipeline::StepKind::Agent(_)) {
                    self.artifacts.discard(dir);
                }
                Done::ok()
            }
            Err(e @ ArtifactError::Io { .. }) => Done::errored(e.to_string()),
            Err(e) => Done::failed(e.to_string()),
        }
    }

    pub(crate) async fn task(
        &'a self,
        step: &'a Step,
        entry: &'a Entry,
        attempt: u32,
        run: &'a RunSpec,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> Done {
        if attempt == 1 {
            self.say_restarted(entry).await;
        }
        let dir = match self.prepare(step, entry, attempt).await {
            Ok(d) => d,
            Err(done) => return done,
        };
        if let Err(e) = super::upstream::write_files(&dir, &self.delivered(step)) {
            return Done::errored(format!("cannot write upstream/ for `context: from`: {e}"));
        }
        let extra = [
            ("TREADLE_RUN".to_owned(), self.run.to_string()),
            ("TREADLE_STEP".to_owned(), entry.name.clone()),
            ("TREADLE_ATTEMPT".to_owned(), attempt.to_string()),
            // How a resume finds this command's processes if treadle dies.
            (
                crate::keeper::MARK.to_owned(),
                crate::keeper::mark(self.store.path(), self.run),
            ),
        ];
        let spec = TaskSpec {
            run,
            dir: &dir,
            env: &step.env,
            extra_env: &extra,
            pass_env: &step.pass_env,
            confined: step.confined.unwrap_or(true),
        };
        let (run_id, seq) = (self.run, entry.seq);
        let limit = OutputLimit::new(self.loaded.pipeline.step_output_limit(), &cancel);
        let on_line = |stream: &'static str, line: String| {
            if limit.take(line.len() + 1) {
                self.emit(Event::Output {
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
            Err(e) => return Done::errored(e.to_string()),
        };
        // `fix:`: a command that ended badly (not one that was cancelled) is handed to
        // the fixer, then runs once more; that run decides.
        let failed = match result.end {
            TaskEnd::Exited(c) => (c != 0).then(|| format!("exit code {c}")),
            TaskEnd::Signaled(s) => Some(format!("killed by signal {s}")),
            TaskEnd::TimedOut(t) => Some(format!("timed out after {t:?}")),
            TaskEnd::Canceled => None,
        };
        if let Some(failure) = failed.filter(|_| step.task_keys().is_some_and(|k| k.fix.is_some()))
        {
            let output = self.transcript.redactor().mask(&result.tail);
            if let Err(done) = self
                .fix(step, entry, &dir, (run, &failure, &output), &cancel)
                .await
            {
                return done;
            }
            result = match run_task(&spec, None, &limit.token, &on_line).await {
                Ok(r) => r,
                Err(e) => return Done::errored(e.to_string()),
            };
        }
        if let Some(reached) = limit.reached() {
            return reached;
        }
        let code = match result.end {
            TaskEnd::Exited(c) => Some(c),
            _ => None,
        };
        let tail = self.transcript.redactor().mask(&result.tail);
        self.update_at(entry, |r| {
            r.exit_code = code;
            r.stdout_tail = tail;
        })
        .await;
        let asserts_code = step.assert.as_ref().is_some_and(|a| a.value.code.is_some());
        let done = match result.end {
            TaskEnd::Exited(0) => Done::ok(),
            // `assert: { code }` judges the exit code instead of "zero is success".
            TaskEnd::Exited(_) if asserts_code => Done::ok(),
            TaskEnd::Exited(c) => {
                let confined = spec.confined && crate::confine::unavailable().is_none();
                match super::denied::hint(c, &result.stderr, &dir).filter(|_| confined) {
                    Some(hint) => Done::failed(format!("exit code {c}; {hint}")),
                    None => Done::failed(format!("exit code {c}")),
                }
            }
            TaskEnd::Signaled(s) => Done::failed(format!("killed by signal {s}")),
            TaskEnd::TimedOut(t) => Done::failed(format!("timed out after {t:?}")),
            TaskEnd::Canceled => self.cancelled(),
        };
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
        self.conclude(step, &dir, facts, given.cell).await
    }

    /// The agent step of `entry`, built from the pipeline the first time it is needed (for
    /// its key or to run it) and the same value after.
    pub(crate) fn agent_step(&self, step: &Step, entry: &Entry) -> Result<Arc<AgentStep>, Done> {
        if let Some(a) = self.state.with(|s| s.agent_steps.get(&entry.seq).cloned()) {
            return Ok(a);
        }
        // Built outside the lock; two cells building at once build the same value and the
        // first one kept is the one every later caller gets.
        let agent = AgentStep::build(self.loaded, step)
            .map(Arc::new)
            .map_err(|e| Done::errored(e.to_string()))?;
        Ok(self
            .state
            .with(|s| s.agent_steps.entry(entry.seq).or_insert(agent).clone()))
    }

    /// Who an agent step's questions go to: the approval mailbox, under the step's number.
    pub(crate) fn asker(
        &self,
        step: &Step,
        entry: &Entry,
        cancel: &CancellationToken,
    ) -> std::sync::Arc<dyn crate::agent::Asker> {
        use std::io::IsTerminal;
        std::sync::Arc::new(crate::run::approval::ask::MailboxAsker {
            store: self.store.clone(),
            transcript: self.transcript.clone(),
            run: self.run,
            seq: entry.seq,
            name: entry.name.clone(),
            job: self.job.name.value.clone(),
            answer_args: self.answer_args(),
            deadline: step.timeout.as_ref().map(|t| t.value.0),
            answerable: self.answerable || std::io::stdin().is_terminal(),
            cancel: cancel.clone(),
            turn: tokio::sync::Mutex::new(()),
        })
    }

    /// Adds the job's token and dollar budgets, less what earlier steps spent.
    pub(super) fn with_job_limits(&self, mut agent_step: AgentStep) -> AgentStep {
        if let Some(limit) = self.job.budget.as_ref().and_then(|b| b.tokens) {
            agent_step = agent_step.with_job_budget(limit, self.state.tokens());
        }
        if let Some(limit) = self.job.budget.as_ref().and_then(|b| b.dollars) {
            let micro = self.state.micro_usd();
            agent_step
                .controls
                .dollars
                .push(crate::agent::DollarBudget {
                    scope: crate::agent::BudgetScope::Job,
                    limit,
                    spent_before: micro as f64 / 1_000_000.0,
                });
        }
        agent_step
    }

    /// Counts what a step spent against the job's budgets.
    pub(super) fn count_spent(&self, outcome: &super::ports::AgentStepOutcome) {
        // Whole micro-dollars: an atomic integer, and far finer than any price.
        let micro = outcome
            .usd
            .map_or(0, |usd| (usd * 1_000_000.0).round() as u64);
        self.state.spend(outcome.tokens, micro);
    }

    /// The decisions `step` reads (`context: { from }`) from this run's records.
    pub(crate) fn delivered(&self, step: &Step) -> Vec<super::upstream::Delivered> {
        self.state
            .with(|s| super::upstream::delivered(step, &s.records))
    }

    /// The agent step as this run gives it: in its directory (`dir:` inside the step
    /// directory), with an `across:` cell's values in its prompt, and what it is handed
    /// before its first turn (`context_paths:`, `prompt_file: { artifact, path }`).
    fn shaped(
        &self,
        built: &AgentStep,
        step: &Step,
        dir: &Path,
        given: Given<'_>,
    ) -> Result<AgentStep, Done> {
        // `dir:` is where the agent works: its tool paths are relative to it.
        let sub = step.agent_call().and_then(|c| c.dir.as_ref());
        let work = sub.map_or(dir.to_path_buf(), |d| dir.join(&d.value));
        let mut agent_step = built.clone().in_dir(work.clone());
        // A cell of an `across:` step gets its values in its prompt.
        if let Some(cell) = given.cell {
            agent_step.prompt = cell
                .render_text(&agent_step.prompt)
                .map_err(|e| Done::errored(format!("prompt: {e}")))?;
        }
        if let Some(text) = given.handed {
            agent_step.prompt = format!("{text}{}", agent_step.prompt);
        }
        let limit = agent_step
            .conversation
            .max_context_bytes
            .unwrap_or(crate::agent::context_files::DEFAULT_CONTEXT_BYTES);
        let delivered = self.delivered(step);
        let (context, prompt) =
            super::handing::handed_files(step, dir, &work, given.cell.map(Cell::vars), limit)
                .map_err(Done::failed)?;
        let before = super::handing::hand_over(&mut agent_step, &delivered, context)
            .map_err(Done::failed)?;
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

    pub(crate) async fn agent(
        &'a self,
        step: &'a Step,
        entry: &'a Entry,
        attempt: u32,
        cancel: CancellationToken,
        given: Given<'a>,
    ) -> Done {
        let built = match self.agent_step(step, entry) {
            Ok(a) => a,
            Err(done) => return done,
        };
        // Which source serves is availability, not content: the key is the primary's.
        let picked = self.state.with(|s| s.picked.clone());
        let built = match step.agent_name() {
            Some(name) if !picked.is_empty() => Arc::new(crate::agent::source_pick::on_picked(
                (*built).clone(),
                &name.value,
                &picked,
            )),
            _ => built,
        };
        // The session reads the key itself; a variable that is not set stops the step here,
        // with the hint, before a directory is made.
        if let Err(e) = built.model.check_key(&process_env) {
            return Done::errored(format!("{e} ({})", e.hint()));
        }
        let routes: Vec<(String, String)> = step
            .routes()
            .into_iter()
            .map(|(v, t)| (v.to_owned(), t.value.clone()))
            .collect();
        // A run this one resumes left the step mid-way: it goes on where it was.
        let left = match attempt {
            1 => self.unfinished_agent(entry).await,
            _ => None,
        };
        // A forked run goes on from a fork of the step's session in the run it forks.
        let forked = match (attempt, &left) {
            (1, None) => match self.forked_agent(entry).await {
                Ok(forked) => forked,
                Err(why) => return Done::errored(why),
            },
            _ => None,
        };
        let dir = match self.prepare(step, entry, attempt).await {
            Ok(d) => d,
            Err(done) => return done,
        };
        if let Some(left) = &left {
            if let Err(why) = self.take_dir(left, &dir).await {
                return Done::errored(why);
            }
            self.emit(super::transcript::Event::Notice {
                run: self.run,
                text: format!(
                    "`{}` interrupted (run {} stopped while it ran): its session {} goes on, with what it committed and the files it wrote",
                    entry.name, left.of, left.session
                ),
            });
        } else if attempt == 1 {
            self.say_restarted(entry).await;
        }
        let mut agent_step = match self.shaped(&built, step, &dir, given) {
            Ok(a) => a,
            Err(done) => return done,
        };
        agent_step = self.with_job_limits(agent_step);
        agent_step.controls.fence = self.fence.clone();
        agent_step.controls.resume = self.resume.or(left.as_ref().map(|l| l.session));
        if let Some(forked) = forked {
            agent_step.controls.fork = Some((forked.parent, forked.point));
            if let Some(prompt) = forked.prompt {
                agent_step.prompt = prompt;
            }
        }
        agent_step.controls.shown = left.as_ref().map(|l| l.shown.clone());
        agent_step.controls.on_session = Some(self.session_noter(entry, &dir));
        agent_step.controls.hooks.run = Some(self.run.to_string());
        agent_step.controls.hooks.job = Some(self.job.name.value.clone());
        let asks_people =
            agent_step.tools.iter().any(|t| t == "ask_human") || agent_step.granted.asks_people();
        match &self.questions {
            // On a worker: to the server whose run it is.
            Some(q) => {
                agent_step.controls.asker = Some(q.asker.clone());
                agent_step.answerer = asks_people.then(|| q.answerer.clone());
            }
            None => {
                agent_step.controls.asker = Some(self.asker(step, entry, &cancel));
                if asks_people {
                    let deadline = step.timeout.as_ref().map(|t| t.value.0);
                    agent_step.answerer = Some(self.answerer(entry, deadline, &cancel));
                }
            }
        }
        let request = AgentStepRequest {
            step: agent_step,
            journal: self.store.journal().clone(),
            reporter: StepReporter {
                transcript: self.transcript.clone(),
                store: self.store.clone(),
                run: self.run,
                seq: entry.seq,
            },
            cancel: cancel.clone(),
        };
        let outcome = match self.agents.run(request).await {
            Ok(o) => o,
            Err(AgentStepError::Infrastructure(m)) => {
                return Done::errored(self.transcript.redactor().mask(&m));
            }
            Err(AgentStepError::Failed(m)) => {
                return Done::failed(self.transcript.redactor().mask(&m));
            }
        };
        self.count_spent(&outcome);
        let tail: String = {
            let masked = self.transcript.redactor().mask(&outcome.text);
            let start = masked.len().saturating_sub(super::task::TAIL_BYTES);
            masked.get(start..).unwrap_or(&masked).to_owned()
        };
        let (verdict, usage) = (outcome.verdict.clone(), outcome.usage.clone());
        let note = outcome
            .note
            .as_ref()
            .map(|n| self.transcript.redactor().mask(n));
        self.update_at(entry, |r| {
            r.verdict = verdict;
            r.note = note;
            r.usage = usage;
            r.stdout_tail = tail;
        })
        .await;
        if cancel.is_cancelled() {
            return self.cancelled();
        }
        if let Some(f) = outcome.failure {
            return Done::failed(f);
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
        let done = self.conclude(step, &dir, facts, given.cell).await;
        if done.status == Status::Succeeded {
            Done { route, ..done }
        } else {
            done
        }
    }
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
        return Err(Done::failed("the agent gave no verdict"));
    };
    match routes.iter().find(|(name, _)| name == v) {
        Some((_, target)) if target == "next" => Ok(None),
        Some((_, target)) => Ok(Some(target.clone())),
        // A bare verdict records the choice and continues in order.
        None if step.verdict_choices().iter().any(|c| c == v) => Ok(None),
        None => Err(Done::failed(format!(
            "the agent gave verdict `{v}`, which is not one of the listed verdicts"
        ))),
    }
}

/// Renames each mapped artifact's directory in `dir` to the name the step uses, or back
/// (`back`) before its outputs are collected.
fn remount(dir: &Path, mounts: &[(String, String)], back: bool) -> Result<(), ArtifactError> {
    for (artifact, inner) in mounts {
        let (from, to) = match back {
            false => (dir.join(artifact), dir.join(inner)),
            true => (dir.join(inner), dir.join(artifact)),
        };
        if from.exists() && !to.exists() {
            std::fs::rename(&from, &to).map_err(|source| ArtifactError::Io {
                what: "cannot rename",
                path: from.clone(),
                source,
            })?;
        }
    }
    Ok(())
}
