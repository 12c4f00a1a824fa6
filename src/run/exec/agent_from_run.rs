//! What the run gives an agent step besides its definition (the job's token and dollar
//! budgets less what earlier steps spent, where its questions for a person go), and what
//! it takes back from the step's [`AgentOutcome`]: what it spent, its usage as the record
//! keeps it, and its failure as a typed [`StepFailure`].

use super::Ctx;
use crate::agent::{AgentOutcome, AgentStatus, AgentStep};
use crate::pipeline::Step;
use crate::pipeline::outline::Entry;
use crate::run::failure::{FailureKind, StepFailure};
use tokio_util::sync::CancellationToken;
use treadle_session::event::FailureCause;

/// Who an agent step's questions go to: the approval mailbox, under the step's number,
/// each waiting until the step's `timeout:`.
pub(crate) fn asker<'a>(
    ctx: &Ctx<'a>,
    step: &Step,
    entry: &Entry,
    cancel: &CancellationToken,
) -> std::sync::Arc<dyn crate::agent::Asker> {
    std::sync::Arc::new(crate::run::approval::ask::MailboxAsker::new(
        super::input::question_asker(ctx, entry),
        step.timeout.as_ref().map(|t| t.value.0),
        cancel.clone(),
    ))
}

/// Adds the job's token and dollar budgets, less what earlier steps spent.
pub(super) fn with_job_limits<'a>(ctx: &Ctx<'a>, mut agent_step: AgentStep) -> AgentStep {
    if let Some(limit) = ctx.job.budget.as_ref().and_then(|b| b.tokens) {
        agent_step = agent_step.with_job_budget(limit, ctx.state.tokens());
    }
    if let Some(limit) = ctx.job.budget.as_ref().and_then(|b| b.dollars) {
        let micro = ctx.state.micro_usd();
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
pub(super) fn count_spent<'a>(ctx: &Ctx<'a>, outcome: &AgentOutcome) {
    // Whole micro-dollars: an atomic integer, and far finer than any price.
    let micro = outcome
        .cost
        .usd()
        .map_or(0, |usd| (usd * 1_000_000.0).round() as u64);
    ctx.state.spend(outcome.usage.total(), micro);
}

/// The step's usage and cost, as its record keeps them.
pub(super) fn usage_record(outcome: &AgentOutcome) -> serde_json::Value {
    serde_json::json!({
        "model": outcome.model,
        "prompt_tokens": outcome.usage.prompt_tokens,
        "completion_tokens": outcome.usage.completion_tokens,
        "cached_tokens": outcome.usage.cached_tokens,
        "cost": outcome.cost,
        "model_calls": outcome.steps,
        "confidence": outcome.confidence,
        "fallback_model": outcome.fallback_model,
    })
}

/// The step's failure, typed, from how its turn ended (`None`: it succeeded). The model
/// endpoint or the journal failing is not the step's doing: those kinds are errors
/// ([`FailureKind::is_error`], exit code 2).
pub(super) fn failure(status: &AgentStatus) -> Option<StepFailure> {
    let kind = match status {
        AgentStatus::Succeeded => return None,
        AgentStatus::Failed { error, cause } => {
            let kind = match cause {
                FailureCause::Model => FailureKind::ModelOutage,
                FailureCause::Journal => FailureKind::Infrastructure,
                FailureCause::Limit | FailureCause::Repeated => FailureKind::Limit,
                FailureCause::Denied => FailureKind::Refused,
                FailureCause::Other => FailureKind::Other,
            };
            if kind.is_error() {
                let why = format!("agent step failed: {error}");
                return Some(StepFailure::new(kind, why));
            }
            kind
        }
        AgentStatus::BudgetExceeded { .. } | AgentStatus::DollarBudgetExceeded { .. } => {
            FailureKind::Budget
        }
        AgentStatus::NoVerdict { .. } => FailureKind::NoVerdict,
        AgentStatus::Interrupted { .. } => FailureKind::Interrupted,
        AgentStatus::InvalidOutput { .. } | AgentStatus::RequiredToolMissing { .. } => {
            FailureKind::InvalidOutput
        }
        AgentStatus::EscalationRejected { .. } => FailureKind::Declined,
    };
    status
        .error()
        .map(|message| StepFailure::new(kind, message))
}

/// Where an agent step runs: its step, its outline entry, its directory and its token.
pub(crate) struct Placed<'p> {
    pub step: &'p Step,
    pub entry: &'p Entry,
    pub dir: &'p std::path::Path,
    pub cancel: &'p CancellationToken,
}

/// The agent step with the run's controls: the write fence, the session it goes on in
/// (a worker's takeover, a resumed run's unfinished step) or forks, what the transcript
/// already showed, where its session is noted, and who its questions go to.
pub(crate) fn controlled(
    ctx: &Ctx<'_>,
    mut agent_step: AgentStep,
    at: &Placed<'_>,
    left: Option<&super::continued::Unfinished>,
    forked: Option<super::forked::Forked>,
) -> AgentStep {
    let (step, entry, cancel) = (at.step, at.entry, at.cancel);
    agent_step.controls.fence = ctx.fence.clone();
    agent_step.controls.resume = ctx.resume.or(left.map(|l| l.session));
    if let Some(forked) = forked {
        agent_step.controls.fork = Some((forked.parent, forked.point));
        if let Some(prompt) = forked.prompt {
            agent_step.prompt = prompt;
        }
    }
    agent_step.controls.shown = left.map(|l| l.shown.clone());
    agent_step.controls.on_session = Some(super::continued::session_noter(ctx, entry, at.dir));
    agent_step.controls.hooks.run = Some(ctx.run.to_string());
    agent_step.controls.hooks.job = Some(ctx.job.name.value.clone());
    agent_step.controls.hooks.mark = Some(crate::keeper::mark(ctx.store.path(), ctx.run));
    let asks_people =
        agent_step.tools.iter().any(|t| t == "ask_human") || agent_step.granted.asks_people();
    match &ctx.questions {
        // On a worker: to the server whose run it is.
        Some(q) => {
            agent_step.controls.asker = Some(q.asker.clone());
            agent_step.answerer = asks_people.then(|| q.answerer.clone());
        }
        None => {
            agent_step.controls.asker = Some(asker(ctx, step, entry, cancel));
            if asks_people {
                let deadline = step.timeout.as_ref().map(|t| t.value.0);
                agent_step.answerer = Some(super::input::answerer(ctx, entry, deadline, cancel));
            }
        }
    }
    agent_step
}

/// The request that runs `agent_step` as the step at `entry`: the run's journal, and a
/// reporter writing to the run's transcript and state file under the step's seq.
pub(super) fn request<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    agent_step: AgentStep,
    cancel: &CancellationToken,
) -> crate::run::ports::AgentStepRequest {
    crate::run::ports::AgentStepRequest {
        step: agent_step,
        journal: ctx.store.journal().clone(),
        reporter: crate::run::ports::StepReporter {
            transcript: ctx.transcript.clone(),
            store: ctx.store.clone(),
            run: ctx.run,
            seq: entry.seq,
        },
        cancel: cancel.clone(),
    }
}
