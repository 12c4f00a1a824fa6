//! One run's view of the cache: the keys its steps got and the digests of its artifacts;
//! and what a run may ask of the cache as it starts ([`Start`]) — fresh, resuming a run, or
//! replaying one from a step. The run's mode made of that request is the run's own
//! (`crate::run::mode`), as are the versions and commits its steps made (`run_state`).
//!
//! * `--resume RUN`: every step that succeeded in RUN with the key it has now comes back
//!   from its record (even one that is never replayed otherwise: a `put`, an approval, a
//!   volatile step), so the run continues where RUN stopped; a step whose key changed (an
//!   edited step, one downstream of it, another file's step) and the rest run under the
//!   usual cache rules.
//! * `--replay RUN --from STEP`: the steps before STEP come back from RUN's records (its
//!   recorded inputs, not a fresh fetch); STEP and every step after it run again.
//! * `--fork RUN --at STEP[/TURN]`: a replay from STEP whose agent step goes on from a fork
//!   of its session in RUN (see `crate::run::exec::forked`); [`StepCache::fork_at`] tells the step.
//! * `--force`: no step is taken from the cache, and every step that succeeds is stored as
//!   usual, so the next ordinary run replays what this one ran (steps' `--force`: persisted
//!   state is ignored, and what ran is still recorded).
//! * `--rerun STEP`: a fresh run in which STEP and every step whose key chains to it run
//!   whatever the cache holds; the steps before it (and branches beside it) are taken from
//!   the cache as usual, and what reran is stored.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::cas::Cas;
use super::chain::Chain;
use super::digest::{Digest, Manifest};
use super::key::KeyParts;
use super::records::{RecordError, Records, RunLink};

/// How a run starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Start {
    /// A fresh run.
    #[default]
    Fresh,
    /// `--resume RUN`.
    Resume(u64),
    /// `--replay RUN --from STEP` (a step name or outline path).
    Replay(u64, String),
    /// `--force`: nothing is taken from the cache; what runs is stored.
    Force,
    /// `--rerun STEP` (a step name or outline path): STEP and what chains to it run.
    Rerun(String),
    /// `--fork RUN --at STEP[/TURN]`: a replay of RUN from STEP, whose agent step forks its
    /// session in RUN.
    Fork(ForkRun),
}

/// What `treadle run --fork` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRun {
    /// The run forked.
    pub of: u64,
    /// `STEP` or `STEP/TURN` (a step name or outline path; turns count from 1).
    pub at: String,
    /// The message the step goes on with (`None`: the step's own prompt).
    pub prompt: Option<String>,
}

/// Where a forked run forks: the step (by outline seq) and its turn, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkAt {
    /// The run forked.
    pub of: u64,
    /// The step's outline seq.
    pub seq: u32,
    /// After which turn of the step's session (`None`: before its first).
    pub turn: Option<u32>,
    /// The message the step goes on with.
    pub prompt: Option<String>,
}

/// Why a run cannot start as asked.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The run to resume or replay is not in the state file.
    #[error("there is no run {0} in this state file (see `treadle runs`)")]
    NoRun(u64),
    /// `--rerun` names no step of the job.
    #[error("job `{job}` has no step `{step}` (see `treadle plan` for its steps)")]
    NoJobStep {
        /// The job.
        job: String,
        /// The name given.
        step: String,
    },
    /// `--from` names no step of the job.
    #[error("run {run} (job `{job}`) has no step `{step}`")]
    NoStep {
        /// The run.
        run: u64,
        /// Its job.
        job: String,
        /// The name given.
        step: String,
    },
    /// The cache tables cannot be used.
    #[error(transparent)]
    Records(#[from] RecordError),
    /// The record of the run to resume or replay could not be read (the state file's
    /// error, kept whole).
    #[error("{0}")]
    Earlier(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<crate::blocking::WorkerStopped> for StartError {
    /// A read of the state file that stopped without returning is a failed read.
    fn from(stopped: crate::blocking::WorkerStopped) -> Self {
        StartError::Records(RecordError::Stopped(stopped))
    }
}

/// The keys of one run's steps, filled in as the run goes.
#[derive(Default)]
pub(super) struct RunKeys {
    /// Keys of leaf steps, by outline seq.
    pub keys: HashMap<u32, Digest>,
    /// Keys of the cells of `across:` steps, by the cell's outline path (`3#1`): a cell
    /// shares its step's seq, so its key is kept apart and folded into the step's.
    pub cell_keys: HashMap<String, Digest>,
    /// Parts of the keys of steps (and cells) that will run, by outline path (for storing
    /// their outcome).
    pub parts: HashMap<String, KeyParts>,
    /// Digests (and manifests) of artifact trees, by path.
    pub trees: HashMap<PathBuf, (Digest, Arc<Manifest>)>,
    /// Steps and cells visited, by outline path (a route back to a step runs it again
    /// rather than replaying).
    pub visited: HashSet<String>,
    /// Entries replayed, to mark as recently used.
    pub touched: Vec<Digest>,
    /// Whether anything new went into the store.
    pub stored: bool,
}

/// Where a key belongs: a step, by its outline seq, or one cell of an `across:` step, by
/// the cell's outline path (its cells share the step's seq).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot<'a> {
    /// A step: its seq and outline path.
    Step(u32, &'a str),
    /// A cell: its outline path (`3#1`).
    Cell(&'a str),
}

impl Slot<'_> {
    fn path(&self) -> &str {
        match self {
            Self::Step(_, p) | Self::Cell(p) => p,
        }
    }

    fn keep(&self, l: &mut RunKeys, key: Digest) {
        match self {
            Self::Step(seq, _) => {
                l.keys.insert(*seq, key);
            }
            Self::Cell(path) => {
                l.cell_keys.insert((*path).to_owned(), key);
            }
        }
    }
}

/// The cache as one run uses it.
pub struct StepCache {
    pub(crate) records: Records,
    pub(crate) cas: Cas,
    /// Replaced as a workflow's plan grows (`rechain`); a YAML run's never changes.
    pub(crate) chain: std::sync::RwLock<Chain>,
    pub(crate) job: String,
    pub(crate) max_size: u64,
    pub(crate) git_dir: PathBuf,
    pub(super) live: Mutex<RunKeys>,
    pub(crate) link: Option<RunLink>,
    /// Where a forked run forks (`--fork`).
    pub(crate) fork: Option<ForkAt>,
}

impl StepCache {
    /// The cache for a run of `job`, which records `link` to how it started and forks
    /// at `fork` (both decided with its mode, `crate::run::mode`). `state_dir` is the
    /// directory of the state file (`.treadle/`).
    pub(crate) fn open(
        records: Records,
        state_dir: &std::path::Path,
        job: &str,
        chain: Chain,
        (link, fork): (Option<RunLink>, Option<ForkAt>),
        max_size: u64,
    ) -> Self {
        Self {
            records,
            cas: Cas::new(state_dir.join("cas")),
            chain: std::sync::RwLock::new(chain),
            job: job.to_owned(),
            max_size,
            git_dir: state_dir.join("git"),
            live: Mutex::new(RunKeys::default()),
            link,
            fork,
        }
    }

    /// Where this run forks, when step `seq` is the step it forks (`--fork`).
    pub(crate) fn fork_at(&self, seq: u32) -> Option<&ForkAt> {
        self.fork.as_ref().filter(|f| f.seq == seq)
    }

    /// Records that `run` came from the resumed or replayed one.
    pub fn link_run(&self, run: u64) -> Result<(), RecordError> {
        match &self.link {
            Some(l) => self.records.link(run, l),
            None => Ok(()),
        }
    }

    /// The run's keys and notes, for this module and the cache's own (the executor uses
    /// the named operations below).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut RunKeys) -> R) -> Option<R> {
        self.live.lock().ok().map(|mut l| f(&mut l))
    }

    /// Notes a visit of the step (or cell) at outline `path`; `true` the first time (a
    /// route back to a step runs it again rather than taking it from the cache).
    pub(crate) fn first_visit(&self, path: &str) -> bool {
        self.with(|l| l.visited.insert(path.to_owned()))
            .unwrap_or(false)
    }

    /// The key of `at`, and the parts to store its outcome under once it ran.
    pub(crate) fn set_key(&self, at: Slot<'_>, parts: KeyParts) {
        self.with(|l| {
            at.keep(l, parts.key());
            l.parts.insert(at.path().to_owned(), parts);
        });
    }

    /// The key `at` was given this run (by outline path), once it has one.
    pub(crate) fn key_at(&self, path: &str) -> Option<Digest> {
        self.with(|l| l.parts.get(path).map(KeyParts::key))
            .flatten()
    }

    /// The key of the step chained before `seq` (zero for the first).
    pub(crate) fn prev_key(&self, seq: u32) -> Digest {
        let Ok(chain) = self.chain.read() else {
            return Digest::ZERO;
        };
        self.with(|l| chain.prev_key(seq, &l.keys))
            .unwrap_or(Digest::ZERO)
    }

    /// The chain of a plan that grew (a workflow's, one step at a time): the keys already
    /// given stay, the steps added chain by the same rule.
    pub(crate) fn rechain(&self, chain: Chain) {
        if let Ok(mut c) = self.chain.write() {
            *c = chain;
        }
    }

    /// The key parts of the step (or cell) at `path`, taken to store its outcome (once).
    pub(crate) fn take_parts(&self, path: &str) -> Option<KeyParts> {
        self.with(|l| l.parts.remove(path)).flatten()
    }

    /// `at` was taken from a recorded outcome under `key`; `touched`: mark the entry used.
    pub(crate) fn reused(&self, at: Slot<'_>, key: Digest, touched: bool) {
        self.with(|l| {
            at.keep(l, key);
            if touched {
                l.touched.push(key);
            }
        });
    }

    /// Gives the `across:` step `seq` its key once its cells ran: their keys in order
    /// (`cells`: their outline paths), so a step after the block chains to every cell
    /// and a changed cell changes it. A cell that never got a key (not admitted) counts
    /// as absent.
    pub(crate) fn fold_cells(&self, seq: u32, cells: &[String]) {
        self.with(|l| {
            let key = super::chain::fold_cells(cells.iter().map(|p| l.cell_keys.get(p).copied()));
            l.keys.insert(seq, key);
        });
    }

    /// Ends the run's use of the cache: marks replayed entries as used and, when new
    /// objects were stored, evicts the least recently used entries over the size limit.
    /// Returns a warning to print, if something went wrong (never fatal).
    pub fn finish(&self) -> Option<String> {
        let (touched, stored) = self.with(|l| (std::mem::take(&mut l.touched), l.stored))?;
        if let Err(e) = self.records.touch(&touched, crate::clock::now_ms()) {
            return Some(format!("cannot mark cache entries as used: {e}"));
        }
        if stored && let Err(e) = self.evict() {
            return Some(format!("cannot evict old cache entries: {e}"));
        }
        None
    }

    fn evict(&self) -> Result<(), RecordError> {
        if self.cas.size() <= self.max_size {
            return Ok(());
        }
        let mut entries = self.records.entries_by_age()?;
        let mut total: u64 = self.cas.size();
        let mut gone = Vec::new();
        // Drop whole entries, oldest use first, until what they held alone fits.
        while total > self.max_size && !entries.is_empty() {
            let old = entries.remove(0);
            gone.push(old.key);
            let keep: HashSet<Digest> = entries.iter().flat_map(objects).collect();
            self.records.remove(&gone)?;
            gone.clear();
            total = total.saturating_sub(self.cas.sweep(&keep));
        }
        Ok(())
    }
}

fn objects(o: &super::records::SuccessRecord) -> Vec<Digest> {
    o.outputs
        .iter()
        .flat_map(|t| t.manifest.entries.iter())
        .filter_map(|e| match e.node {
            super::digest::Node::File { digest, .. } => Some(digest),
            _ => None,
        })
        .collect()
}
