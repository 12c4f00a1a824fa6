//! The executor's mutable run state and its single owner: what steps change while the run
//! goes (their records, the execution log, captured vars, built agent steps, the versions
//! its gets fetched and the commits its agents made, ...), held
//! under one lock that is only taken for short, synchronous sections (never across an
//! `.await`), and the budget counters beside it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::cell::CellAt;
use super::state::StepRecord;
use crate::agent::AgentStep;
use crate::agent::commit::GitInput;
use crate::pipeline::vars::Vars;

/// One entry of the execution log: a leaf step (or a cell) that ran to its end.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    /// The step's place in the outline (`2/0`, `1/on_failure`); a cell's is its step's.
    pub path: String,
    /// For a cell of an `across:` step: its index among the step's cells.
    pub cell: Option<u32>,
    /// The name `assert: execution` matches.
    pub name: String,
}

/// What the run's steps change while it goes.
#[derive(Default)]
pub(crate) struct RunState {
    /// Each step's record, by outline seq.
    pub records: Vec<StepRecord>,
    /// The first failure to write the state file, which makes the run exit 2.
    pub state_error: Option<String>,
    /// Agent steps as built from the pipeline, by outline seq (each is built once).
    pub agent_steps: HashMap<u32, Arc<AgentStep>>,
    /// The steps that ran, in the order `assert: execution` checks.
    pub log: Vec<Logged>,
    /// The vars `load_var:` steps captured in this run.
    pub vars: Vars,
    /// Each `across:` cell's view of its step's record (the cells share it) as the cell
    /// last changed it: what its cache entry stores.
    pub cell_records: HashMap<CellAt, StepRecord>,
    /// The agents that start this run on a `fallback:` entry (its index) because the
    /// pre-run probe found their primary down, by agent name.
    pub picked: HashMap<String, usize>,
    /// The agents whose sources were probed before their first step (`exec::job::pick_sources`).
    pub probed: HashSet<String>,
    /// The versions the `every` gets take in the input set running now, by outline seq.
    pub every_versions: HashMap<u32, String>,
    /// The version each `get` resolved (a commit, or a version as canonical JSON), by
    /// outline seq.
    pub versions: HashMap<u32, String>,
    /// Where each step's input artifacts were before it ran, by outline seq (to wipe an
    /// agent's work).
    pub inputs_before: HashMap<u32, HashMap<String, PathBuf>>,
    /// Artifacts that hold a git resource's tree, by artifact name (the name steps list
    /// under `inputs:`): the resource and the commit.
    pub git_inputs: HashMap<String, GitInput>,
    /// The commits an agent step made on its git inputs, by outline seq: artifact → commit.
    pub commits: HashMap<u32, BTreeMap<String, String>>,
}

/// The single owner of a run's mutable state: one lock for the state, and the two budget
/// counters. The counters stay atomics because agent steps running at once add to them
/// and a cell's admission reads them while it polls; they are only ever added to and read
/// (no section needs them consistent with the rest of the state).
#[derive(Default)]
pub(crate) struct Owner {
    state: Mutex<RunState>,
    /// Tokens spent by agent steps, against the job's budget.
    tokens: AtomicU64,
    /// Micro-dollars spent by agent steps, against the job's dollar budget.
    micro_usd: AtomicU64,
}

impl Owner {
    /// The owner of `state`, with what earlier processes spent counted in.
    pub(crate) fn new(state: RunState, tokens: u64, micro_usd: u64) -> Self {
        Self {
            state: Mutex::new(state),
            tokens: AtomicU64::new(tokens),
            micro_usd: AtomicU64::new(micro_usd),
        }
    }

    /// Runs `f` on the state under its lock. `f` is synchronous, so the lock is never held
    /// across an `.await`; a section that panicked left the state as whole values (each
    /// change is one assignment or insert), so a poisoned lock is used as it is.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut RunState) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Tokens spent so far.
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Micro-dollars spent so far.
    pub(crate) fn micro_usd(&self) -> u64 {
        self.micro_usd.load(Ordering::Relaxed)
    }

    /// Counts what a step spent.
    pub(crate) fn spend(&self, tokens: u64, micro_usd: u64) {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
        self.micro_usd.fetch_add(micro_usd, Ordering::Relaxed);
    }
}

/// The run's git and resource state, under the same lock: named operations, so the
/// steps that write it and those that read it agree on its shape.
impl Owner {
    /// Where step `seq`'s input artifacts were before it ran.
    pub(crate) fn set_inputs_before(&self, seq: u32, before: HashMap<String, PathBuf>) {
        self.with(|s| s.inputs_before.insert(seq, before));
    }

    /// Where input `artifact` of step `seq` was before it ran.
    pub(crate) fn input_before(&self, seq: u32, artifact: &str) -> Option<PathBuf> {
        self.with(|s| {
            s.inputs_before
                .get(&seq)
                .and_then(|m| m.get(artifact).cloned())
        })
    }

    /// A `get` step's resolved version.
    pub(crate) fn set_version(&self, seq: u32, version: String) {
        self.with(|s| s.versions.insert(seq, version));
    }

    /// The version step `seq` resolved, if it is a `get` that did.
    pub(crate) fn version(&self, seq: u32) -> Option<String> {
        self.with(|s| s.versions.get(&seq).cloned())
    }

    /// Artifact `artifact` holds `input` (a git resource's tree at a commit).
    pub(crate) fn set_git_input(&self, artifact: String, input: GitInput) {
        self.with(|s| s.git_inputs.insert(artifact, input));
    }

    /// The git resource and commit artifact `artifact` holds, if it holds one.
    pub(crate) fn git_input(&self, artifact: &str) -> Option<GitInput> {
        self.with(|s| s.git_inputs.get(artifact).cloned())
    }

    /// Step `seq` committed its work on `artifact` as `commit` (kept with its outcome).
    pub(crate) fn set_commit(&self, seq: u32, artifact: String, commit: String) {
        self.with(|s| s.commits.entry(seq).or_default().insert(artifact, commit));
    }

    /// The commits step `seq` made on its git inputs: artifact → commit.
    pub(crate) fn commits(&self, seq: u32) -> BTreeMap<String, String> {
        self.with(|s| s.commits.get(&seq).cloned())
            .unwrap_or_default()
    }
}
