//! The outline of a job: every step it could run (nested steps and hooks included) in
//! plan order, each with a sequence number, a path and a depth.
//!
//! The executor records each step under its sequence number, and `treadle plan` prints
//! the outline. Entries are keyed by the step's address because a [`Step`] has no
//! identity of its own; the pipeline is held unmoved for the whole run, so the address
//! is stable.

use std::collections::HashMap;

use super::{At, Job, Kind, Step, StepKind};

/// One step in the outline.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Sequence number, from 0, in plan order.
    pub seq: u32,
    /// Place in the plan: indices and hook names, e.g. `2/0`, `1/ensure`, `job/on_failure`.
    pub path: String,
    /// Display name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Nesting depth.
    pub depth: u32,
    /// The agent an agent step uses (its `agent:`), for checks that need every agent a
    /// job reaches (`treadle validate --preflight`).
    pub agent: Option<String>,
    /// For one cell of an `across:` step: its index among the step's cells (the cell
    /// shares the step's seq; its path is [`cell_path`]).
    pub cell: Option<u32>,
}

/// What separates a cell's index from its step's outline path (`3#1`); no other outline
/// path holds it.
pub const CELL_SEP: char = '#';

/// The outline path of cell `index` of the `across:` step at `path`.
pub fn cell_path(path: &str, index: u32) -> String {
    format!("{path}{CELL_SEP}{index}")
}

impl Entry {
    /// The entry of cell `index` of this `across:` step, named `name`.
    pub fn cell(&self, index: u32, name: String) -> Entry {
        Entry {
            name,
            path: cell_path(&self.path, index),
            cell: Some(index),
            ..self.clone()
        }
    }
}

/// A job's outline.
#[derive(Debug, Default)]
pub struct Outline {
    /// Entries in plan order.
    pub entries: Vec<Entry>,
    index: HashMap<usize, u32>,
}

impl Outline {
    /// Builds the outline of a job.
    pub fn of(job: &Job) -> Self {
        let mut o = Self::default();
        for (i, s) in job.plan.iter().enumerate() {
            o.add(s, i.to_string(), 0);
        }
        for (name, hook) in job.hooks() {
            o.add(hook, format!("job/{name}"), 0);
        }
        o
    }

    fn add(&mut self, step: &At<Step>, path: String, depth: u32) {
        let seq = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        self.index.insert(key(step), seq);
        let kind = Kind::of(step);
        self.entries.push(Entry {
            seq,
            path: path.clone(),
            name: step.display_name(),
            kind,
            depth,
            agent: match &step.kind {
                StepKind::Agent(call) => Some(call.agent.value.clone()),
                _ => None,
            },
            cell: None,
        });
        match &step.kind {
            StepKind::Try(s) => self.add(s, format!("{path}/try"), depth + 1),
            StepKind::Ensemble(e) => {
                for (i, s) in e.agents.iter().enumerate() {
                    self.add(s, format!("{path}/{i}"), depth + 1);
                }
                if let Some(judge) = &e.judge {
                    self.add(judge, format!("{path}/judge"), depth + 1);
                }
            }
            _ => {
                for (i, s) in step.children().into_iter().enumerate() {
                    self.add(s, format!("{path}/{i}"), depth + 1);
                }
            }
        }
        for (name, hook) in step.hooks() {
            self.add(hook, format!("{path}/{name}"), depth + 1);
        }
    }

    /// The entry of a step of this job.
    pub fn entry(&self, step: &At<Step>) -> Option<&Entry> {
        self.index
            .get(&key(step))
            .and_then(|&i| self.entries.get(i as usize))
    }
}

fn key(step: &At<Step>) -> usize {
    std::ptr::from_ref(step) as usize
}
