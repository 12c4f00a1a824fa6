//! `treadle runs --cost`: tokens and cost per run, or per step of one run, from the usage
//! each agent step recorded. A step whose model has no price is unpriced, and so is any
//! total that includes one: a missing price is never counted as free. A step replayed
//! from the cache counts at the cost it recorded when it ran, and that part of a total is
//! also shown apart, in the `replayed` column (`crate::run::spent`).

use crate::console::say;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::EXIT_CONFIG;
use crate::run::spent::RunSpent;
use crate::run::state::{RunRecord, StepRecord, Store};

/// One row's figures: tokens and cost, and the part replayed from the cache.
fn row(sums: &RunSpent) -> String {
    let all = sums.total();
    let replayed = match sums.replayed.agents {
        0 => "-".to_owned(),
        _ => sums.replayed.cost_text(),
    };
    format!(
        "{:>9} {:>10} {:>8} {:>10} {:>10}",
        all.prompt,
        all.completion,
        all.cached,
        all.cost_text(),
        replayed
    )
}

const HEADER: &str = "   prompt completion   cached       cost   replayed";

pub(super) fn runs(
    file: &Path,
    steps: Option<u64>,
    state: Option<PathBuf>,
    only: Option<&Path>,
) -> u8 {
    let path = match super::inspect::recorded(file, state) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let store = match Store::open(&path) {
        // A watcher holds it: what it last wrote beside it.
        Err(e @ crate::run::StateError::Held(_)) => {
            return match super::inspect::from_watcher(&path, &e) {
                Some(snap) => from_snapshot(&snap, steps, only),
                None => {
                    crate::console::tell!("{e}");
                    EXIT_CONFIG
                }
            };
        }
        other => other,
    };
    let shown = store.and_then(|store| match steps {
        None => {
            let mut all = Vec::new();
            for r in store.runs()? {
                if super::inspect::is_of(only, &r.pipeline) {
                    let steps = store.steps(r.id)?;
                    all.push((r, steps));
                }
            }
            print_runs(&all, only.is_none());
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

/// `treadle runs --cost` from a watcher's snapshot.
fn from_snapshot(
    snap: &crate::watch::control::RunsSnapshot,
    steps: Option<u64>,
    only: Option<&Path>,
) -> u8 {
    match steps {
        None => {
            let all: Vec<_> = snap
                .runs
                .iter()
                .filter(|(r, _)| super::inspect::is_of(only, &r.pipeline))
                .cloned()
                .collect();
            print_runs(&all, only.is_none());
            0
        }
        Some(run) => match super::inspect::snapshot_run(snap, run) {
            Ok((_, list)) => {
                print_steps(&list);
                0
            }
            Err(e) => {
                crate::console::tell!("{e}");
                EXIT_CONFIG
            }
        },
    }
}

/// The table of `treadle runs --cost` (also printed from a server's answer); `with_file`:
/// a column says each run's pipeline file.
pub(super) fn print_runs(runs: &[(RunRecord, Vec<StepRecord>)], with_file: bool) {
    let file = |name: &str| match with_file {
        true => format!("{name:<20} "),
        false => String::new(),
    };
    say!(
        "{:>5}  {}{:<16} {:<10} {HEADER}",
        "run",
        file("file"),
        "job",
        "status"
    );
    for (r, steps) in runs {
        say!(
            "{:>5}  {}{:<16} {:<10} {}",
            r.id,
            file(&r.pipeline),
            r.job,
            r.status.as_str(),
            row(&RunSpent::of(steps))
        );
    }
}

/// The table of `treadle runs --cost --steps N` (also printed from a server's answer).
pub(super) fn print_steps(list: &[StepRecord]) {
    say!("{:<24} {:<20} {HEADER}", "step", "model");
    for s in list.iter().filter(|s| s.produced.usage.is_some()) {
        let model = match s.cached_from {
            Some(run) => format!("replayed (run {run})"),
            None => s
                .produced
                .usage
                .as_ref()
                .and_then(|u| u.get("model"))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_owned(),
        };
        say!(
            "{:<24} {:<20} {}",
            s.name,
            model,
            row(&RunSpent::of(std::slice::from_ref(s)))
        );
    }
    say!("{:<24} {:<20} {}", "total", "", row(&RunSpent::of(list)));
}
