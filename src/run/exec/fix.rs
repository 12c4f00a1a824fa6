//! `fix:` on a task: when its command fails, the fixer agent is handed the command and
//! its output in the task's directory; the command then runs once more, and that run
//! decides the step. A green command never starts the fixer.
//!
//! Decisions made here: the fixer is told the command (it can rerun it with `run_shell`
//! when granted) rather than given a tool of its own; one fixer conversation per attempt,
//! never a loop; the fixer is logged for `assert: execution` under its agent's name,
//! before the task, and records nothing of its own (its events go to the task's record,
//! and its usage is added to the task's, so the run's tokens and cost count it).

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::{Ctx, Done};
use crate::agent::AgentStep;
use crate::pipeline::agent_call::{Fixer, Prompt};
use crate::pipeline::model::process_env;
use crate::pipeline::outline::Entry;
use crate::pipeline::{AgentCall, At, RunSpec, Step};
use crate::run::failure::FailureKind;
use crate::run::transcript::Event;

/// A fixer that cannot be built or has no key: the pipeline's to put right.
const CONFIG: FailureKind = FailureKind::Configuration;

/// What the fixer is told, besides the `prompt:` of a `fix:` mapping.
fn instruction(task: &str, run: &RunSpec, failure: &str, output: &str) -> String {
    let command = match run {
        RunSpec::Shell(s) => s.clone(),
        RunSpec::Exec(c) => format!("{} {}", c.path, c.args.join(" ")),
    };
    format!(
        "The command of task `{task}` failed ({failure}). Make the smallest change that \
         makes it pass; it runs again once you are done.\n\nThe command:\n```\n{}\n```\n\n\
         The end of its output:\n```\n{}\n```",
        command.trim_end(),
        output.trim_end()
    )
}

/// Runs `fix`, the fixer of a task that failed with `failure`, printing `output`, in
/// the task's directory `dir`. `Err` when the fixer could not be run at all.
pub(crate) async fn fix<'a>(
    ctx: &Ctx<'a>,
    fix: &At<Fixer>,
    entry: &Entry,
    dir: &Path,
    (run, failure, output): (&RunSpec, &str, &str),
    cancel: &CancellationToken,
) -> Result<(), Done> {
    let spec = &fix.value.spec;
    let mut prompt = instruction(&entry.name, run, failure, output);
    if let Some(extra) = &spec.prompt {
        prompt = format!("{extra}\n\n{prompt}");
    }
    let call = AgentCall {
        prompt: Prompt::Text(prompt),
        tools: spec.tools.clone(),
        ..AgentCall::new(fix.value.def.clone())
    };
    let fixer = Step {
        name: Some(At::new(spec.agent.value.clone())),
        timeout: spec.timeout.clone(),
        ..Step::agent(call.clone())
    };
    let built = AgentStep::build(ctx.loaded, &fixer, &call)
        .map_err(|e| Done::fail(CONFIG, format!("fix: {e}")))?;
    if let Err(e) = built.model.check_key(&process_env) {
        return Err(Done::fail(CONFIG, format!("fix: {e} ({})", e.hint())));
    }
    let work = spec
        .dir
        .as_ref()
        .map_or(dir.to_path_buf(), |d| dir.join(&d.value));
    let mut agent_step = super::agent_from_run::with_job_limits(ctx, built.in_dir(work));
    agent_step.controls.asker = Some(super::agent_from_run::asker(ctx, &fixer, entry, cancel));
    // Said in the step it repairs (the page shows it there, above the fixer's
    // conversation, under the fixer's name), not as a note of the run.
    let note = format!(
        "fix: `{}` failed; agent `{}` repairs it, then it runs again",
        entry.name, spec.agent.value
    );
    ctx.emit(Event::Agent {
        run: ctx.run,
        seq: entry.seq,
        what: "fixer".to_owned(),
        data: serde_json::json!({ "fixer": spec.agent.value, "text": note }),
        summary: note,
        at_ms: Some(crate::clock::now_ms()),
    });
    let request = super::agent_from_run::request(ctx, entry, agent_step, cancel);
    let failure = match ctx.agents.run(request).await {
        Ok(outcome) => {
            super::agent_from_run::count_spent(ctx, &outcome);
            // The task's record carries what its fixers spent: the run's totals read it.
            let usage = super::agent_from_run::usage_record(&outcome);
            super::record::update_at(ctx, entry, |r| {
                let before = r.produced.usage.take();
                r.produced.usage = Some(crate::run::spent::add_usage(before, &usage));
            })
            .await;
            super::agent_from_run::failure(&outcome.status)
        }
        Err(e) => Some(e.failure()),
    };
    if let Some(failure) = failure {
        let why = ctx.transcript.redactor().mask(&failure.message);
        let agent = &spec.agent.value;
        if failure.kind.is_error() {
            let why = format!("fix: agent `{agent}` could not run: {why}");
            return Err(Done::fail(failure.kind, why));
        }
        // The command's rerun decides the step, whatever the fixer concluded.
        let text = format!("fix: agent `{agent}` failed: {why}");
        ctx.emit(Event::Notice { run: ctx.run, text });
    }
    // Logged beside the step it fixed (the log orders a group by its members' places).
    super::record::log_as(ctx, entry, spec.agent.value.clone());
    Ok(())
}
