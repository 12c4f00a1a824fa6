//! `treadle runs --cost`: tokens and cost per run, or per step of one run, from the usage
//! each agent step recorded. A step whose model has no price is unpriced, and so is any
//! total that includes one: a missing price is never counted as free. A step replayed
//! from the cache spent nothing in its run and counts as zero.

use crate::console::say;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::EXIT_CONFIG;
use crate::run::state::{RunRecord, StepRecord, Store};

/// Tokens and cost summed over steps.
#[derive(Default)]
struct Total {
    prompt: u64,
    completion: u64,
    cached: u64,
    usd: f64,
    unpriced: bool,
    agents: usize,
}

impl Total {
    fn add(&mut self, usage: &Value) {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        self.prompt += n("prompt_tokens");
        self.completion += n("completion_tokens");
        self.cached += n("cached_tokens");
        self.agents += 1;
        match usage
            .get("cost")
            .and_then(|c| c.get("usd"))
            .and_then(Value::as_f64)
        {
            Some(usd) => self.usd += usd,
            None => self.unpriced = true,
        }
    }

    /// What `steps` spent in their run: a step taken from the cache spent nothing.
    fn of(steps: &[StepRecord]) -> Self {
        let mut t = Self::default();
        for s in steps {
            t.step(s);
        }
        t
    }

    fn step(&mut self, s: &StepRecord) {
        if let (Some(u), None) = (&s.usage, s.cached_from) {
            self.add(u);
        }
    }

    fn cost(&self) -> String {
        match (self.agents, self.unpriced) {
            (0, _) => "-".to_owned(),
            (_, true) => "unpriced".to_owned(),
            (_, false) => format!("${:.4}", self.usd),
        }
    }

    fn row(&self) -> String {
        format!(
            "{:>9} {:>10} {:>8} {:>10}",
            self.prompt,
            self.completion,
            self.cached,
            self.cost()
        )
    }
}

const HEADER: &str = "   prompt completion   cached       cost";

pub(super) fn runs(file: &Path, steps: Option<u64>, state: Option<PathBuf>) -> u8 {
    let path = match super::inspect::recorded(file, state) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let shown = Store::open(&path).and_then(|store| match steps {
        None => {
            let mut all = Vec::new();
            for r in store.runs()? {
                let steps = store.steps(r.id)?;
                all.push((r, steps));
            }
            print_runs(&all);
            Ok(())
        }
        Some(run) => {
            store.run(run)?;
            print_steps(&store.steps(run)?);
            Ok(())
        }
    });
    match shown {
        Ok(()) => 0,
        Err(e) => {
            crate::console::tell!("{e}");
            EXIT_CONFIG
        }
    }
}

/// The table of `treadle runs --cost` (also printed from a server's answer).
pub(super) fn print_runs(runs: &[(RunRecord, Vec<StepRecord>)]) {
    say!("{:>5}  {:<16} {:<10} {HEADER}", "run", "job", "status");
    for (r, steps) in runs {
        let total = Total::of(steps);
        say!(
            "{:>5}  {:<16} {:<10} {}",
            r.id,
            r.job,
            r.status.as_str(),
            total.row()
        );
    }
}

/// The table of `treadle runs --cost --steps N` (also printed from a server's answer).
pub(super) fn print_steps(list: &[StepRecord]) {
    say!("{:<24} {:<20} {HEADER}", "step", "model");
    for s in list.iter().filter(|s| s.usage.is_some()) {
        let mut t = Total::default();
        let model = match s.cached_from {
            Some(run) => format!("replayed (run {run})"),
            None => s
                .usage
                .as_ref()
                .and_then(|u| u.get("model"))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_owned(),
        };
        t.step(s);
        say!("{:<24} {:<20} {}", s.name, model, t.row());
    }
    say!("{:<24} {:<20} {}", "total", "", Total::of(list).row());
}
