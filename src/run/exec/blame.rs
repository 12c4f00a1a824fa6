//! Why a job failed, said where the user reads it (the run's last line and its record):
//! which step failed it, and how to run again an agent step the cache brought back before
//! that step (`treadle run --rerun NAME`).
//!
//! The step is found by its error: a failure travels up unchanged from the leaf that
//! failed through its containers and hooks, so the failed record holding the job's error,
//! deepest in the outline, is the step that failed it.

use super::{Ctx, Done, Status};
use crate::run::failure::StepFailure;
use crate::run::state::StepRecord;

/// `judged` (the job's result after its asserts) with its error naming the step that
/// failed `plan` (the result before them), and the cached agent step to run again.
pub(crate) fn blame(ctx: &Ctx<'_>, plan: &Done, judged: Done) -> Done {
    if judged.is_ok() || judged.status == Status::Aborted {
        return judged;
    }
    let records = ctx.state.with(|s| s.records.clone());
    let culprit = plan.failure.as_ref().and_then(|f| failed_with(&records, f));
    let mut error = judged.error().unwrap_or_default().to_owned();
    if let Some(step) = culprit {
        let own = step.error.as_deref().unwrap_or_default();
        error = if error == own {
            format!("step `{}` failed: {error}", step.name)
        } else {
            // A job assert replaced the plan's failure: say both.
            format!("{error}; the plan failed at step `{}`: {own}", step.name)
        };
    } else if let Some(own) = plan.error().filter(|own| *own != error) {
        // No step failed it (it stopped before the first, as when no source of an
        // agent answered): the reason would otherwise be lost under the job assert.
        error = format!("{error}; the plan failed: {own}");
    }
    if let Some(hint) = rerun_hint(&records, culprit.map(|s| s.seq), &run_command(ctx)) {
        error = format!("{error}; {hint}");
    }
    // The job's failure keeps its kind; its message names the step.
    judged.reworded(|_| error)
}

/// The failed step whose failure is `failure` (its kind and message), deepest in the
/// outline.
fn failed_with<'r>(records: &'r [StepRecord], failure: &StepFailure) -> Option<&'r StepRecord> {
    records
        .iter()
        .filter(|r| r.status.is_failure() && r.failure == Some(failure.kind))
        .filter(|r| r.error.as_deref() == Some(failure.message.as_str()))
        .max_by_key(|r| r.seq)
}

/// `treadle run` as the user would type it for this run's file, job and state file: the
/// hint is a command to paste, so it names the file even when it is `treadle.yml` (the
/// user may stand anywhere).
pub(crate) fn run_command(ctx: &Ctx<'_>) -> String {
    let mut cmd = format!(
        "treadle run {}",
        shell_word(&ctx.loaded.file.display().to_string())
    );
    if ctx.loaded.pipeline.jobs.len() > 1 {
        cmd = format!("{cmd} --job {}", shell_word(&ctx.job.name.value));
    }
    if ctx.store.path() != crate::run::state_path(&ctx.loaded.file, None) {
        let state = ctx.store.path().display().to_string();
        cmd = format!("{cmd} --state {}", shell_word(&state));
    }
    cmd
}

/// How to run again the last agent step taken from the cache before step `before` (any,
/// when no step is to blame), with `run` (`treadle run FILE ...`): a wrong answer that
/// once succeeded is replayed until then.
fn rerun_hint(records: &[StepRecord], before: Option<u32>, run: &str) -> Option<String> {
    let agent = records
        .iter()
        .filter(|r| r.kind == "agent" && r.cached_from.is_some())
        .filter(|r| before.is_none_or(|b| r.seq < b))
        .max_by_key(|r| r.seq)?;
    Some(format!(
        "agent step `{}` was taken from the cache (run {}); to run it again: {run} --rerun {}",
        agent.name,
        agent.cached_from.unwrap_or_default(),
        shell_word(&agent.name)
    ))
}

/// `name` as one shell word (quoted when it holds anything but plain characters).
pub(crate) fn shell_word(name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:@".contains(c));
    if plain && !name.is_empty() {
        name.to_owned()
    } else {
        format!("'{}'", name.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::failure::FailureKind;
    use crate::run::state::StepStatus;

    fn record(seq: u32, name: &str, kind: &str, status: StepStatus) -> StepRecord {
        let mut r = StepRecord::pending(seq, seq.to_string(), name.into(), kind.into());
        r.status = status;
        r
    }

    #[test]
    fn the_deepest_failed_record_with_the_failure_is_blamed() {
        let boom = StepFailure::new(FailureKind::ExitStatus, "boom");
        let mut outer = record(0, "group", "do", StepStatus::Failed);
        outer.set_failure(Some(boom.clone()));
        let mut inner = record(1, "build", "task", StepStatus::Failed);
        inner.set_failure(Some(boom.clone()));
        let mut other = record(2, "lint", "task", StepStatus::Failed);
        other.set_failure(Some(StepFailure::new(FailureKind::ExitStatus, "another")));
        // The same words of another kind are another failure.
        let mut timed = record(3, "slow", "task", StepStatus::Failed);
        timed.set_failure(Some(StepFailure::new(FailureKind::Timeout, "boom")));
        let records = [outer, inner, other, timed];
        assert_eq!(
            failed_with(&records, &boom).map(|r| &*r.name),
            Some("build")
        );
        let none = StepFailure::new(FailureKind::ExitStatus, "nothing like it");
        assert!(failed_with(&records, &none).is_none());
    }

    #[test]
    fn the_hint_names_the_last_cached_agent_before_the_failure() {
        let mut early = record(0, "draft", "agent", StepStatus::Succeeded);
        early.cached_from = Some(3);
        let mut late = record(1, "review it", "agent", StepStatus::Succeeded);
        late.cached_from = Some(4);
        let mut after = record(3, "summarise", "agent", StepStatus::Succeeded);
        after.cached_from = Some(4);
        let ran = record(2, "check", "agent", StepStatus::Succeeded);
        let records = [early, late, ran, after];
        assert_eq!(
            rerun_hint(&records, Some(2), "treadle run ci.yml").as_deref(),
            Some(
                "agent step `review it` was taken from the cache (run 4); to run it again: \
                 treadle run ci.yml --rerun 'review it'"
            )
        );
        assert!(rerun_hint(&records[2..3], None, "treadle run").is_none());
    }
}
