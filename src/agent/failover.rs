//! `fallback:` in the middle of a step: when the model serving the conversation fails
//! with an outage (unreachable, 5xx, a cut or silent stream, after the session's own
//! retries), the next source of the agent continues the same conversation, restored from
//! the journal, rather than starting the task over.
//!
//! Only the source changes: the tools, persona, limits and the verdict slot stay. The turn
//! budget (`max_turns`) is the step's, so a resumed source gets what is left of it. A
//! refusal (a 4xx), a budget, a denial or an interrupt never switches sources. Each
//! source's calls are priced at its own model's price ([`FellBack`]).

use treadle_event::Usage;
use treadle_session::event::{FailureCause, SessionId};
use treadle_session::{TurnOutcome, TurnReport};

use super::budget::add_costs;
use super::cost::{Cost, cost};
use super::error::AgentError;
use super::observe::AgentEvent;
use super::session_builder::session_builder;
use super::spec::AgentStep;
use super::turns::{Sources, Turns, converse};
use crate::pipeline::ResolvedModel;

/// The fallback that took a step over, and how the step's usage splits between it and the
/// sources before it: each source's calls cost its own model's price.
#[derive(Debug, Clone)]
pub(super) struct FellBack {
    /// The fallback's model (the last to serve).
    pub model: String,
    /// What the sources before it cost, each at its price.
    pub before: Cost,
    /// The usage of its own calls.
    pub last: Usage,
}

impl FellBack {
    /// The step's cost: the sources before, and the last's usage at `price` (its model's).
    pub(super) fn cost(&self, price: Option<&super::cost::ModelPrice>) -> Cost {
        add_costs(self.before, cost(&self.last, price))
    }
}

impl Sources<'_> {
    /// While the conversation of session `id` ended in an outage, hands it to the next
    /// source; the turns of all of them, the model that served last, and the fallback
    /// that took over (if one did).
    pub(super) async fn cascade(
        &self,
        id: SessionId,
        mut turns: Turns,
        mut served: Option<String>,
    ) -> Result<(Turns, Option<String>, Option<FellBack>), AgentError> {
        let step = self.step;
        let mut fell_back: Option<FellBack> = None;
        // The usage of the source serving now (the primary's, to begin with).
        let mut segment = turns.usage;
        let mut next_sources = step.fallbacks.iter();
        while let Some(error) = outage(&turns.last).map(str::to_owned) {
            let Some(next) = next_sources.next() else {
                break;
            };
            let from = served.clone().unwrap_or_else(|| step.model.model.clone());
            if let Err(e) = next.check_key(&crate::pipeline::model::process_env) {
                self.observer.on_event(AgentEvent::Notice(format!(
                    "agent.failover: `{}` skipped: {e}",
                    next.model
                )));
                continue;
            }
            self.observer.on_event(AgentEvent::Notice(format!(
                "agent.failover: `{from}` failed ({error}); `{}` continues the conversation",
                next.model
            )));
            let resumed = resumed_on(step, next, turns.steps);
            let session = session_builder(
                &resumed,
                self.journal,
                self.tools.to_vec(),
                self.guard.clone(),
                self.command_hooks,
            )
            .restore(id)
            .await?;
            let on_next = Sources {
                step: &resumed,
                ..*self
            };
            let (more, now) = converse(&session, &on_next).await?;
            // The source that failed is priced now, at its model's price.
            let spent = cost(&segment, step.price(&from).as_ref());
            let before = match &fell_back {
                Some(f) => add_costs(f.before, spent),
                None => spent,
            };
            segment = more.usage;
            let (mut usage, steps) = (turns.usage, turns.steps + more.steps);
            usage += more.usage;
            turns = Turns {
                usage,
                steps,
                ..more
            };
            served = now.or_else(|| Some(next.model.clone()));
            fell_back = Some(FellBack {
                model: next.model.clone(),
                before,
                last: segment,
            });
        }
        Ok((turns, served, fell_back))
    }
}

/// What the resumed source is told: the conversation so far is in its history.
const CONTINUE: &str = "The model that was serving this conversation became unavailable, and you are taking over. Everything above happened already. Continue the task from where it stopped.";

/// The error of a turn that ended in an outage of its model, if it did.
fn outage(report: &TurnReport) -> Option<&str> {
    match &report.outcome {
        TurnOutcome::Failed {
            error,
            failure: FailureCause::Model,
            model: Some(kind),
        } if kind.is_outage() => Some(error),
        _ => None,
    }
}

/// The step as the next source runs it: that model, the continuation as its input, and
/// the model calls left of the step's limit after `used`.
fn resumed_on(step: &AgentStep, model: &ResolvedModel, used: u32) -> AgentStep {
    let mut next = step.clone();
    next.model = model.clone();
    // The session is already restored; the next source begins with a turn of its own.
    next.controls.resume = None;
    next.prompt = CONTINUE.to_owned();
    let limit = step.model_call_limit();
    if limit != u32::MAX {
        next.max_turns = Some(limit.saturating_sub(used).max(1));
    }
    next
}
