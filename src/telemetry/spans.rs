//! The pipeline's tracing spans: run, job and step. The session, turn, model-call,
//! tool-call and gate-wait spans below them are the runtime's (`treadle_session`).
//!
//! Fields hold names, ids and outcomes only, never a command, a prompt or a value.

use tracing::Span;
use tracing::field::Empty;

use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};

/// The span of one run of a job.
pub fn run(run: u64, job: &str, pipeline: &str) -> Span {
    tracing::info_span!(
        "run",
        run.id = run,
        job.name = job,
        pipeline = pipeline,
        run.status = Empty,
        otel.status_code = Empty,
    )
}

/// The span of a job's plan, its hooks and its asserts, inside its run's span.
pub fn job(run: &Span, name: &str) -> Span {
    tracing::info_span!(parent: run, "job", job.name = name)
}

/// The span of one step with its attempts and hooks; `entry` is its place in the outline.
pub fn step(step: &At<Step>, entry: Option<&Entry>) -> Span {
    let span = tracing::info_span!(
        "step",
        otel.name = format!("step {}", step.display_name()),
        step.name = %step.display_name(),
        step.seq = Empty,
        step.kind = Empty,
        step.status = Empty,
        otel.status_code = Empty,
    );
    if let Some(entry) = entry {
        span.record("step.seq", entry.seq);
        span.record("step.kind", entry.kind.to_string());
    }
    span
}

/// Records how a step or run ended on its span (`step.status` or `run.status`): the
/// status's name (`run::Status::name`, given as a word so telemetry does not import the
/// executor that calls it).
pub fn record_status(span: &Span, word: &'static str) {
    span.record("step.status", word);
    span.record("run.status", word);
    if word != "succeeded" {
        span.record("otel.status_code", "ERROR");
    }
}
