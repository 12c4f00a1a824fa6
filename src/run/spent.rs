//! What agent steps spent, read from their usage records: the one reading of those records
//! that `treadle runs --cost`, the API and the page share, and the one way two records
//! are added (a task's `fix:` agents, counted with the task).
//!
//! Decisions made here: a step taken from the cache costs what it cost when it ran (its
//! record keeps that usage), counted apart as *replayed*, so a run whose agent steps all
//! came from the cache shows their cost as replayed rather than `$0`; a model with no
//! price makes every sum that includes it unpriced (`None`), never zero.

use serde_json::{Value, json};

use super::state_records::StepRecord;

/// Tokens and cost summed over some agent steps' usage records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    /// Prompt tokens (cached ones included).
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached: u64,
    /// US dollars; `None` when one of the records has no price.
    pub usd: Option<f64>,
    /// How many records were added.
    pub agents: usize,
}

impl Default for Spent {
    fn default() -> Self {
        Self {
            prompt: 0,
            completion: 0,
            cached: 0,
            usd: Some(0.0),
            agents: 0,
        }
    }
}

impl Spent {
    /// One usage record (`{"prompt_tokens", "completion_tokens", "cached_tokens", "cost"}`).
    pub fn of_usage(usage: &Value) -> Self {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        Self {
            prompt: n("prompt_tokens"),
            completion: n("completion_tokens"),
            cached: n("cached_tokens"),
            usd: usd_of(usage),
            agents: 1,
        }
    }

    /// Adds `other`: an unpriced part makes the sum unpriced.
    pub fn add(&mut self, other: &Self) {
        self.prompt += other.prompt;
        self.completion += other.completion;
        self.cached += other.cached;
        self.usd = self.usd.zip(other.usd).map(|(a, b)| a + b);
        self.agents += other.agents;
    }

    /// Prompt and completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt + self.completion
    }

    /// The cost, `None` when nothing was added or a part is unpriced.
    pub fn cost_usd(&self) -> Option<f64> {
        if self.agents == 0 { None } else { self.usd }
    }

    /// The cost in words: `-` with no agent step, `unpriced`, or dollars.
    pub fn cost_text(&self) -> String {
        match (self.agents, self.usd) {
            (0, _) => "-".to_owned(),
            (_, None) => "unpriced".to_owned(),
            (_, Some(usd)) => format!("${usd:.4}"),
        }
    }
}

/// What one step's record says it spent, and whether it was replayed from the cache.
pub fn of_step(step: &StepRecord) -> Option<(Spent, bool)> {
    let usage = step.produced.usage.as_ref()?;
    Some((Spent::of_usage(usage), step.cached_from.is_some()))
}

/// What a run's steps spent: run in it (`fresh`) and replayed from the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunSpent {
    /// Spent by steps that ran.
    pub fresh: Spent,
    /// Recorded by steps taken from the cache (spent by the runs they came from).
    pub replayed: Spent,
}

impl RunSpent {
    /// The sums over `steps`.
    pub fn of(steps: &[StepRecord]) -> Self {
        let mut sums = Self::default();
        for (spent, replayed) in steps.iter().filter_map(of_step) {
            match replayed {
                true => sums.replayed.add(&spent),
                false => sums.fresh.add(&spent),
            }
        }
        sums
    }

    /// Both together: the cost of the run's results.
    pub fn total(&self) -> Spent {
        let mut all = self.fresh;
        all.add(&self.replayed);
        all
    }
}

/// The dollars of a usage record's `cost` (`{"cost": "priced", "usd": ..}`), `None` when
/// it is unpriced or absent.
fn usd_of(usage: &Value) -> Option<f64> {
    usage
        .get("cost")
        .and_then(|c| c.get("usd"))
        .and_then(Value::as_f64)
}

/// `into` with `more` added: token counts and model calls summed, the cost unpriced when
/// either is. The model is `into`'s when it has one (the first agent counted).
pub fn add_usage(into: Option<Value>, more: &Value) -> Value {
    let Some(mut base) = into else {
        return more.clone();
    };
    for key in [
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "model_calls",
    ] {
        let sum = [&base, more]
            .iter()
            .filter_map(|u| u.get(key).and_then(Value::as_u64))
            .sum::<u64>();
        base[key] = json!(sum);
    }
    base["cost"] = match usd_of(&base).zip(usd_of(more)) {
        Some((a, b)) => json!({"cost": "priced", "usd": a + b}),
        None => json!({"cost": "unpriced"}),
    };
    if base.get("model").is_none_or(Value::is_null) {
        base["model"] = more.get("model").cloned().unwrap_or(Value::Null);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64, usd: Option<f64>) -> Value {
        let cost = match usd {
            Some(usd) => json!({"cost": "priced", "usd": usd}),
            None => json!({"cost": "unpriced"}),
        };
        json!({"model": "m", "prompt_tokens": prompt, "completion_tokens": completion, "cost": cost})
    }

    #[test]
    fn added_usage_sums_tokens_and_stays_unpriced_when_one_part_is() {
        let both = add_usage(Some(usage(10, 2, Some(0.5))), &usage(5, 1, Some(0.25)));
        assert_eq!(both["prompt_tokens"], 15);
        assert_eq!(Spent::of_usage(&both).usd, Some(0.75));
        let one = add_usage(Some(usage(10, 2, Some(0.5))), &usage(5, 1, None));
        assert_eq!(Spent::of_usage(&one).usd, None);
        assert_eq!(Spent::of_usage(&one).cost_text(), "unpriced");
    }

    #[test]
    fn a_replayed_step_counts_apart_at_its_recorded_cost() {
        let mut ran = StepRecord::pending(1, "0".into(), "a".into(), "agent".into());
        ran.produced.usage = Some(usage(10, 2, Some(0.5)));
        let mut cached = ran.clone();
        cached.cached_from = Some(3);
        let sums = RunSpent::of(&[cached.clone()]);
        assert_eq!(sums.fresh.cost_text(), "-");
        assert_eq!(sums.replayed.cost_usd(), Some(0.5));
        assert_eq!(RunSpent::of(&[ran, cached]).total().tokens(), 24);
    }
}
