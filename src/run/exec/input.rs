//! `input:` steps, and an agent step's `ask_human` questions: a run parks a question for a
//! person (see [`crate::run::approval::question`]) and goes on with the answer, a JSON value
//! that fits the question's schema.
//!
//! An `input:` step writes the answer to `answer.json` in each of its `outputs:`, so the
//! steps after it read it as an input. Its `timeout:` is the question's deadline: then its
//! `default:` is the answer, or the step fails.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use treadle_session::GateAnswer;

use super::{Ctx, Done};
use crate::agent::Answerer;
use crate::assert::StepFacts;
use crate::pipeline::outline::Entry;
use crate::pipeline::{InputStep, Step};
use crate::run::approval::question::{Asked, Asker};
use crate::run::failure::FailureKind;

/// The file an `input:` step writes its answer to, in each of its outputs.
pub const ANSWER_FILE: &str = "answer.json";

/// Who asks the questions of the step at `entry`.
pub(crate) fn question_asker<'a>(ctx: &Ctx<'a>, entry: &Entry) -> Asker {
    Asker {
        store: ctx.store.clone(),
        transcript: ctx.transcript.clone(),
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        job: ctx.job.name.value.clone(),
        answer_args: super::approval_step::answer_args(ctx),
        answerable: ctx.answerable,
    }
}

/// Answers an agent step's `ask_human` calls by parking each question until
/// `deadline` (the step's `timeout:`) or `cancel`.
pub(crate) fn answerer<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    deadline: Option<Duration>,
    cancel: &CancellationToken,
) -> Answerer {
    let (asker, cancel) = (question_asker(ctx, entry), cancel.clone());
    Answerer {
        ask: std::sync::Arc::new(move |question| {
            let (asker, cancel) = (asker.clone(), cancel.clone());
            Box::pin(async move { gate_answer(asker.ask(question, deadline, &cancel).await) })
        }),
        deadline,
    }
}

/// Runs an `input:` step.
pub(crate) async fn input<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    asked: &'a InputStep,
    entry: &'a Entry,
    attempt: u32,
    cancel: CancellationToken,
) -> Done {
    let Some(question) = asked.question() else {
        return Done::fail(
            FailureKind::Configuration,
            format!("input `{}` has no `question:`", entry.name),
        );
    };
    let deadline = step.timeout.as_ref().map(|t| t.value.0);
    let dir = match super::step_dir::prepare(ctx, step, entry, attempt).await {
        Ok(d) => d,
        Err(done) => return done,
    };
    let value = match question_asker(ctx, entry)
        .ask(question, deadline, &cancel)
        .await
    {
        Asked::Answered { value, .. } => value,
        Asked::Declined { reason } => {
            return Done::fail(
                FailureKind::Declined,
                format!("input `{}` was declined: {reason}", entry.name),
            );
        }
        Asked::TimedOut => {
            return Done::fail(
                FailureKind::Timeout,
                format!(
                    "input `{}` got no answer before its timeout and has no `default:`",
                    entry.name
                ),
            );
        }
        Asked::Unanswerable { reason } => return Done::failed(reason),
        Asked::Aborted => return ctx.cancelled(),
        Asked::Failed { reason } => return Done::fail(FailureKind::Infrastructure, reason),
    };
    let text = format!("{value}\n");
    for output in &step.outputs {
        let path = dir.join(&output.value).join(ANSWER_FILE);
        if let Err(e) = std::fs::write(&path, &text) {
            return Done::fail(
                FailureKind::Infrastructure,
                format!("cannot write {}: {e}", path.display()),
            );
        }
    }
    let tail = ctx.transcript.redactor().mask(&text);
    super::record::update(ctx, entry.seq, |r| r.produced.stdout_tail = tail).await;
    let facts = StepFacts {
        dir: &dir,
        stdout: &text,
        stderr: "",
        code: None,
        verdict: None,
        tool_calls: &[],
    };
    super::step_dir::conclude(ctx, step, &dir, facts, None).await
}

/// What a question's end means to the gate of an `ask_human` call.
fn gate_answer(asked: Asked) -> GateAnswer {
    match asked {
        Asked::Answered { value, .. } => GateAnswer::Answer { value },
        Asked::TimedOut => GateAnswer::Expired,
        Asked::Declined { reason } | Asked::Unanswerable { reason } | Asked::Failed { reason } => {
            GateAnswer::deny(reason)
        }
        Asked::Aborted => GateAnswer::deny("the step was cancelled before an answer came"),
    }
}
