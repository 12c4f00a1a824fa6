//! Token budgets: a guard hook that refuses the next model call once a budget is spent.
//!
//! The guard counts the usage of each committed model call (what the session crate calls a
//! step) from the session's own `StepDone` events. It holds a subscription of its own and
//! drains it, without waiting, when the next inference begins: the loop actor publishes a
//! model call's `StepDone` before it acknowledges the commit to the turn, so by the time the turn asks for the next inference the event is
//! already queued. A budget is spent when the tokens used (by earlier steps of the job, for
//! a job budget, plus this agent step) reach its limit; the call that would go over is the
//! one refused, so an agent step never starts a model call it cannot afford to begin.
//!
//! The tokens of the sub-agents the agent step delegated to count too ([`Delegated`]): an agent's
//! ceiling covers everything it delegates, and [`BudgetGuard::remaining`] is what a
//! delegation takes its share of.
//!
//! Dollar budgets are checked at the same point, pricing the usage counted so far at the
//! agent step's model price. A dollar budget without a price is refused when the pipeline loads
//! (`crate::pipeline::controls`); should one reach the guard anyway (a library user), the
//! guard refuses the first call rather than run unbounded (fail closed).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use treadle_event::{EventKind, Usage};
use treadle_hook::{Decision, Hook, HookCall, Operation};
use treadle_session::Subscription;

use super::cost::{Cost, ModelPrice, cost};

/// A dollar limit an agent step runs under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DollarBudget {
    /// Where the limit comes from.
    pub scope: BudgetScope,
    /// US dollars.
    pub limit: f64,
    /// Dollars already spent against it before this step (earlier steps of the job).
    pub spent_before: f64,
}

/// Which budget a limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetScope {
    /// `budget:` on the step or its agent: this step's tokens only.
    Step,
    /// `budget:` on the job: every agent step of the job.
    Job,
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Step => "step",
            Self::Job => "job",
        })
    }
}

/// A token limit an agent step runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    /// Where the limit comes from.
    pub scope: BudgetScope,
    /// Prompt plus completion tokens.
    pub limit: u64,
    /// Tokens already spent against it before this step (earlier steps of the job).
    pub spent_before: u64,
}

/// The budget that stopped a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tripped {
    pub(crate) scope: BudgetScope,
    pub(crate) spent: u64,
    pub(crate) limit: u64,
}

/// The dollar budget that stopped a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TrippedDollars {
    pub(crate) scope: BudgetScope,
    /// Dollars spent; `None` when the model has no price.
    pub(crate) spent: Option<f64>,
    pub(crate) limit: f64,
}

/// The tokens (and their cost) a step's sub-agents spent on its behalf, across every
/// session of the step.
#[derive(Debug, Default)]
pub(crate) struct Delegated(Mutex<Option<(Usage, Cost)>>);

impl Delegated {
    /// Adds what one delegation spent; one unpriced delegation makes the sum unpriced.
    pub(crate) fn charge(&self, usage: Usage, spent: Cost) {
        let mut sum = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *sum = Some(match *sum {
            None => (usage, spent),
            Some((mut total, cost)) => {
                total += usage;
                (total, add_costs(cost, spent))
            }
        });
    }

    /// Every token charged so far.
    pub(crate) fn total(&self) -> Usage {
        self.spent().map(|(usage, _)| usage).unwrap_or_default()
    }

    /// What was charged, if anything was.
    pub(crate) fn spent(&self) -> Option<(Usage, Cost)> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sum of two costs: unpriced when either is.
pub(crate) fn add_costs(a: Cost, b: Cost) -> Cost {
    match (a.usd(), b.usd()) {
        (Some(a), Some(b)) => Cost::Priced { usd: a + b },
        _ => Cost::Unpriced,
    }
}

/// The guard hook.
pub(crate) struct BudgetGuard {
    budgets: Vec<TokenBudget>,
    dollars: Vec<DollarBudget>,
    price: Option<ModelPrice>,
    delegated: Arc<Delegated>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    events: Option<Subscription>,
    spent: Usage,
    tripped: Option<Tripped>,
    tripped_dollars: Option<TrippedDollars>,
}

impl BudgetGuard {
    pub(crate) fn new(budgets: Vec<TokenBudget>) -> Self {
        Self {
            budgets,
            dollars: Vec::new(),
            price: None,
            delegated: Arc::default(),
            state: Mutex::new(State::default()),
        }
    }

    /// Counts the tokens of the step's sub-agents too.
    pub(crate) fn with_delegated(mut self, delegated: Arc<Delegated>) -> Self {
        self.delegated = delegated;
        self
    }

    /// The fewest tokens left under any of the step's token budgets (its own and its
    /// sub-agents' spending counted); `None` when it has none.
    pub(crate) fn remaining(&self) -> Option<u64> {
        let mut state = self.lock();
        let drained = drain_usage(state.events.as_mut());
        state.spent += drained;
        let spent = state.spent.total() + self.delegated.total().total();
        self.budgets
            .iter()
            .map(|b| b.limit.saturating_sub(b.spent_before + spent))
            .min()
    }

    /// The fewest dollars left under any of the step's dollar budgets (its own and its
    /// sub-agents' spending counted); `None` when it has none, or when what was spent
    /// cannot be priced (a sub-agent then gets no share: see `delegate.rs`).
    pub(crate) fn remaining_usd(&self) -> Option<f64> {
        if self.dollars.is_empty() {
            return None;
        }
        let spent = {
            let mut state = self.lock();
            let drained = drain_usage(state.events.as_mut());
            state.spent += drained;
            self.usd_spent(&state)?
        };
        self.dollars
            .iter()
            .map(|b| (b.limit - b.spent_before - spent).max(0.0))
            .min_by(f64::total_cmp)
    }

    /// Dollars this step and its sub-agents spent; `None` when any of it has no price.
    fn usd_spent(&self, state: &State) -> Option<f64> {
        let own = cost(&state.spent, self.price.as_ref()).usd()?;
        match self.delegated.spent() {
            Some((_, theirs)) => Some(own + theirs.usd()?),
            None => Some(own),
        }
    }

    /// Adds dollar budgets, counted at `price`.
    pub(crate) fn with_dollars(
        mut self,
        dollars: Vec<DollarBudget>,
        price: Option<ModelPrice>,
    ) -> Self {
        self.dollars = dollars;
        self.price = price;
        self
    }

    /// The dollar budget that refused a call, if one did.
    pub(crate) fn tripped_dollars(&self) -> Option<TrippedDollars> {
        self.lock().tripped_dollars
    }

    /// Gives the guard the session's events; until then it counts nothing.
    pub(crate) fn attach(&self, events: Subscription) {
        let mut state = self.lock();
        // What the previous session (a source `fallback:` left) spent still counts.
        let drained = drain_usage(state.events.as_mut());
        state.spent += drained;
        state.events = Some(events);
    }

    /// The budget that refused a call, if one did.
    pub(crate) fn tripped(&self) -> Option<Tripped> {
        self.lock().tripped
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides whether one more model call may be made.
    fn check(&self) -> Decision {
        let mut state = self.lock();
        let drained = drain_usage(state.events.as_mut());
        state.spent += drained;
        let delegated = self.delegated.total().total();
        for budget in &self.budgets {
            let spent = budget.spent_before + state.spent.total() + delegated;
            if spent >= budget.limit {
                state.tripped = Some(Tripped {
                    scope: budget.scope,
                    spent,
                    limit: budget.limit,
                });
                return Decision::deny(format!(
                    "the {} token budget is spent ({spent} of {} tokens)",
                    budget.scope, budget.limit
                ));
            }
        }
        // What the sub-agents spent counts against the dollar ceilings as their tokens
        // count against the token ones.
        let usd = self.usd_spent(&state);
        for budget in &self.dollars {
            let spent = usd.map(|usd| budget.spent_before + usd);
            if spent.is_none_or(|spent| spent >= budget.limit) {
                state.tripped_dollars = Some(TrippedDollars {
                    scope: budget.scope,
                    spent,
                    limit: budget.limit,
                });
                return Decision::deny(match spent {
                    Some(spent) => format!(
                        "the {} dollar budget is spent (${spent:.4} of ${:.4})",
                        budget.scope, budget.limit
                    ),
                    None => format!(
                        "the {} dollar budget cannot be counted: the model has no price",
                        budget.scope
                    ),
                });
            }
        }
        Decision::Allow
    }
}

/// Sums the usage of the `StepDone` events already queued, without waiting for more.
fn drain_usage(events: Option<&mut Subscription>) -> Usage {
    let mut tokens = Usage::default();
    let Some(events) = events else { return tokens };
    // `unconstrained`: tokio's cooperative budget could otherwise report a queued event as
    // not ready, and the guard would miss usage it must count.
    while let Some(Some(Ok(delivery))) =
        tokio::task::coop::unconstrained(events.next()).now_or_never()
    {
        if let EventKind::StepDone { usage, .. } = &delivery.event.kind {
            tokens += *usage;
        }
    }
    tokens
}

#[async_trait::async_trait]
impl Hook for BudgetGuard {
    fn name(&self) -> &str {
        "budget"
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        if call.op != Operation::Inference || (self.budgets.is_empty() && self.dollars.is_empty()) {
            return Decision::Allow;
        }
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_spent_before_the_step_refuses_the_first_call() {
        let guard = BudgetGuard::new(vec![
            TokenBudget {
                scope: BudgetScope::Step,
                limit: 1000,
                spent_before: 0,
            },
            TokenBudget {
                scope: BudgetScope::Job,
                limit: 500,
                spent_before: 500,
            },
        ]);
        match guard.check() {
            Decision::Deny { reason } => {
                assert_eq!(reason, "the job token budget is spent (500 of 500 tokens)");
            }
            other => panic!("allowed: {other:?}"),
        }
        assert_eq!(
            guard.tripped(),
            Some(Tripped {
                scope: BudgetScope::Job,
                spent: 500,
                limit: 500
            })
        );
    }

    #[test]
    fn a_dollar_budget_counts_the_price_and_fails_closed_without_one() {
        let budget = DollarBudget {
            scope: BudgetScope::Job,
            limit: 1.0,
            spent_before: 1.5,
        };
        let priced = BudgetGuard::new(Vec::new()).with_dollars(
            vec![budget],
            Some(ModelPrice {
                prompt: 1.0,
                completion: 1.0,
                cached: None,
            }),
        );
        match priced.check() {
            Decision::Deny { reason } => {
                assert_eq!(
                    reason,
                    "the job dollar budget is spent ($1.5000 of $1.0000)"
                );
            }
            other => panic!("allowed: {other:?}"),
        }
        let unpriced = BudgetGuard::new(Vec::new()).with_dollars(
            vec![DollarBudget {
                spent_before: 0.0,
                ..budget
            }],
            None,
        );
        assert!(!unpriced.check().is_allow());
        assert_eq!(unpriced.tripped_dollars().and_then(|t| t.spent), None);
        let fresh = BudgetGuard::new(Vec::new()).with_dollars(
            vec![DollarBudget {
                spent_before: 0.0,
                ..budget
            }],
            Some(ModelPrice::default()),
        );
        assert!(fresh.check().is_allow());
    }

    #[test]
    fn an_unspent_budget_allows() {
        let guard = BudgetGuard::new(vec![TokenBudget {
            scope: BudgetScope::Step,
            limit: 10,
            spent_before: 0,
        }]);
        assert!(guard.check().is_allow());
        assert_eq!(guard.tripped(), None);
    }
}
