//! The cache as a service to the executor: before a leaf step runs, whether a record may
//! stand in for it (a hit, or a miss and why); after it succeeded, storing its outputs and
//! its record. The executor (`crate::run::exec::cached`) shows and records what happens; this
//! module never touches the transcript or the run's records.
//!
//! A hit restores the outputs from the object store, checking every digest; a corrupt
//! object is an error here and makes the step run instead: nothing is lost but time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::StepCache;
use super::cas::CasError;
use super::digest::{self, Digest, DigestError, Manifest};
use super::records::{OutputTree, RecordError, SuccessRecord};
use crate::blocking::{WorkerStopped, blocking};
use crate::pipeline::{Step, StepKind};

/// Why the cache could not do what the executor asked. None of these fails a step: a
/// step that cannot be replayed runs, one that cannot be stored is only not cached.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache's tables in the state file.
    #[error(transparent)]
    Records(#[from] RecordError),
    /// The object store (a missing or corrupt object, an I/O error).
    #[error(transparent)]
    Objects(#[from] CasError),
    /// Hashing an artifact tree.
    #[error(transparent)]
    Digest(#[from] DigestError),
    /// The blocking task doing the work did not finish.
    #[error("the cache's worker stopped: {}", .0.0)]
    Worker(#[from] WorkerStopped),
}

/// What the cache says before a leaf step runs.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// A succeeded record with the step's key.
    Hit(Box<SuccessRecord>),
    /// The step must run.
    Miss(Miss),
}

/// Why a step must run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// A route came back to it: it runs again rather than repeating itself.
    Revisited,
    /// `--replay --from` runs it whatever the cache holds.
    Forced,
    /// It is never replayed outside a resume (`volatile`, a `put`, an approval).
    NotReplayable,
    /// No succeeded record has its key.
    NoEntry,
}

/// The artifacts a leaf step produces: its `outputs`, and a `get`'s own artifact.
pub(crate) fn produced(step: &Step) -> Vec<String> {
    let mut out: Vec<String> = step.outputs.iter().map(|o| o.value.clone()).collect();
    if let StepKind::Get(crate::pipeline::GetStep { name: g, .. }) = &step.kind
        && !out.contains(&g.value)
    {
        out.push(g.value.clone());
    }
    out
}

/// Whether the step has a key of its own (containers are keyed by their steps).
pub(crate) fn is_leaf(step: &Step) -> bool {
    matches!(
        step.kind,
        StepKind::Task { .. }
            | StepKind::Agent(_)
            | StepKind::Get(_)
            | StepKind::Put(_)
            | StepKind::Approval { .. }
            | StepKind::Input(_)
            | StepKind::Http { .. }
    )
}

/// Whether the cache may ever replay this step outside a resume or replay. A guarded
/// step is not (its guard decides at run time whether it runs), nor is an `across:` step
/// as a whole (its cells are looked up one by one: [`cell_replayable`]).
pub(crate) fn replayable(step: &Step) -> bool {
    step.across.is_none() && replayable_kind(step)
}

/// Whether the cache may replay one cell of an `across:` step: as it would the step
/// without its `across:`, unless the block collects outputs. A replayed cell captures
/// nothing, so the collection would have a hole where that cell's files belong.
pub(crate) fn cell_replayable(step: &Step) -> bool {
    step.outputs.is_empty() && replayable_kind(step)
}

fn replayable_kind(step: &Step) -> bool {
    !step.volatile
        && step.when.is_none()
        && !uses_captured_var(step)
        && matches!(
            step.kind,
            StepKind::Task { .. } | StepKind::Agent(_) | StepKind::Get(_) | StepKind::Http { .. }
        )
}

/// Whether a task's command holds a `((name))` a `load_var:` fills at run time (the
/// key sees the text before it is filled, so such a step cannot be replayed by key).
fn uses_captured_var(step: &Step) -> bool {
    let StepKind::Task { run, .. } = &step.kind else {
        return false;
    };
    match &run.value {
        crate::pipeline::RunSpec::Shell(line) => line.contains("(("),
        crate::pipeline::RunSpec::Exec(cfg) => {
            cfg.path.contains("((") || cfg.args.iter().any(|a| a.contains("(("))
        }
    }
}

impl StepCache {
    /// Whether a succeeded record may stand in for a step with `key`; `forced`: the run's
    /// mode says the step runs whatever the cache holds.
    pub(crate) fn lookup(
        &self,
        forced: bool,
        key: &Digest,
        first_visit: bool,
        replayable: bool,
    ) -> Result<Lookup, CacheError> {
        let miss = if !first_visit {
            Some(Miss::Revisited)
        } else if forced {
            Some(Miss::Forced)
        } else if !replayable {
            Some(Miss::NotReplayable)
        } else {
            None
        };
        if let Some(why) = miss {
            return Ok(Lookup::Miss(why));
        }
        Ok(match self.records.entry(key)? {
            Some(outcome) => Lookup::Hit(Box::new(outcome)),
            None => Lookup::Miss(Miss::NoEntry),
        })
    }

    /// Run `of`'s record of step `seq`, when it succeeded there. A run that resumed
    /// another and was stopped before it brought a step back holds no record of it: the
    /// run it resumed does (and so on back), so a resume of the latest run never runs
    /// again a step one of them recorded. (The caller still reuses it only for its key.)
    pub(crate) fn recorded(&self, of: u64, seq: u32) -> Result<Option<SuccessRecord>, CacheError> {
        let mut run = of;
        loop {
            if let Some(outcome) = self.records.result(run, seq)? {
                return Ok(Some(outcome));
            }
            match self.records.link_of(run)? {
                // Links point to earlier runs only, so this ends.
                Some(link) if link.how == "resume" && link.of < run => run = link.of,
                _ => return Ok(None),
            }
        }
    }

    /// The digest of an artifact tree, hashed once per run and path.
    pub(crate) async fn tree(self: &Arc<Self>, path: PathBuf) -> Result<Digest, CacheError> {
        if let Some(Some((d, _))) = self.with(|l| l.trees.get(&path).cloned()) {
            return Ok(d);
        }
        let p = path.clone();
        let m = blocking::<_, CacheError>(move || Ok(digest::manifest(&p)?)).await?;
        let d = m.digest();
        self.with(|l| l.trees.insert(path, (d, Arc::new(m))));
        Ok(d)
    }

    /// Notes an artifact tree whose digest is known (restored or stored), so that it is
    /// not hashed again.
    pub(crate) fn know_tree(&self, path: PathBuf, digest: Digest, manifest: Manifest) {
        self.with(|l| l.trees.insert(path, (digest, Arc::new(manifest))));
    }

    /// Restores `outcome`'s output trees under `dir`, checking every object. Blocking.
    pub(crate) fn restore(&self, outcome: &SuccessRecord, dir: &Path) -> Result<(), CacheError> {
        for t in &outcome.outputs {
            self.cas.restore(&t.manifest, &dir.join(&t.name))?;
        }
        Ok(())
    }

    /// Drops an entry that cannot be replayed (a corrupt or missing object), so it is not
    /// offered again.
    pub(crate) fn forget(&self, key: &Digest) {
        // Best effort: a failure only means the next run finds it corrupt again.
        let _ = self.records.forget(key);
    }

    /// Hashes an artifact tree and stores its objects; the tree and the bytes newly stored.
    pub(crate) async fn store_tree(
        self: &Arc<Self>,
        name: String,
        path: PathBuf,
    ) -> Result<OutputTree, CacheError> {
        let (p, cas) = (path.clone(), self.cas.clone());
        let (manifest, bytes) = blocking::<_, CacheError>(move || {
            let m = digest::manifest(&p)?;
            let bytes = cas.store(&p, &m)?;
            Ok((m, bytes))
        })
        .await?;
        let digest = manifest.digest();
        self.know_tree(path, digest, manifest.clone());
        if bytes > 0 {
            self.with(|l| l.stored = true);
        }
        Ok(OutputTree {
            name,
            digest,
            manifest,
        })
    }

    /// Records a succeeded step at `path` of this run's job (`replayable`: the record may
    /// stand in for the step in later runs) inside the caller's transaction `txn`, which
    /// the caller commits with the run's record of the step and its events. Blocking.
    pub(crate) fn put_success_in(
        &self,
        txn: &redb::WriteTransaction,
        path: &str,
        outcome: &SuccessRecord,
        replayable: bool,
    ) -> Result<(), CacheError> {
        Ok(self
            .records
            .put_success_in(txn, &self.job, path, outcome, replayable)?)
    }
}
