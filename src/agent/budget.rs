//! Token budgets: a guard hook that refuses the next model call once a budget is spent.
//!
//! The guard counts the usage of each committed step from the session's own `StepDone`
//! events. It holds a subscription of its own and drains it, without waiting, when the next
//! inference begins: the loop actor publishes a step's `StepDone` before it acknowledges the
//! commit to the turn, so by the time the turn asks for the next inference the event is
//! already queued. A budget is spent when the tokens used (by earlier steps of the job, for
//! a job budget, plus this step) reach its limit; the call that would go over is the one
//! refused, so a step never starts a model call it cannot afford to begin.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use futures::{FutureExt, StreamExt};
use treadle_event::EventKind;
use treadle_hook::{Decision, Hook, HookCall, Operation};
use treadle_session::Subscription;

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

/// The guard hook.
pub(crate) struct BudgetGuard {
    budgets: Vec<TokenBudget>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    events: Option<Subscription>,
    spent: u64,
    tripped: Option<Tripped>,
}

impl BudgetGuard {
    pub(crate) fn new(budgets: Vec<TokenBudget>) -> Self {
        Self {
            budgets,
            state: Mutex::new(State::default()),
        }
    }

    /// Gives the guard the session's events; until then it counts nothing.
    pub(crate) fn attach(&self, events: Subscription) {
        self.lock().events = Some(events);
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
        state.spent += drain_usage(state.events.as_mut());
        for budget in &self.budgets {
            let spent = budget.spent_before + state.spent;
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
        Decision::Allow
    }
}

/// Sums the usage of the `StepDone` events already queued, without waiting for more.
fn drain_usage(events: Option<&mut Subscription>) -> u64 {
    let Some(events) = events else { return 0 };
    let mut tokens = 0;
    // `unconstrained`: tokio's cooperative budget could otherwise report a queued event as
    // not ready, and the guard would miss usage it must count.
    while let Some(Some(Ok(delivery))) =
        tokio::task::coop::unconstrained(events.next()).now_or_never()
    {
        if let EventKind::StepDone { usage, .. } = &delivery.event.kind {
            tokens += usage.total();
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
        if call.op != Operation::Inference || self.budgets.is_empty() {
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
