//! Which step comes "before" each step, for chaining keys, and how a container's key is
//! made from its children's.
//!
//! * In a plan or a `do:`, a step follows the step before it; the first follows whatever
//!   the container follows.
//! * Each branch of an `in_parallel:` follows what the group follows, tagged with its
//!   position in the group: branches do not chain to each other, yet two identical
//!   branches still have different keys (one must not replay the other's work).
//! * A hook follows the step it hooks; the job's hooks follow the plan's last step.
//! * A `do:` or `try:` has the key of its last child that ran; an `in_parallel:` the hash of
//!   its branches' keys.

use std::collections::{HashMap, HashSet};

use super::digest::Digest;
use crate::pipeline::outline::Outline;
use crate::pipeline::{At, Job, Step, StepKind};

#[derive(Debug, Clone)]
enum Composite {
    /// The last child with a key.
    Last(Vec<u32>),
    /// All branches, hashed together.
    All(Vec<u32>),
}

impl Composite {
    fn children(&self) -> &[u32] {
        match self {
            Self::Last(c) | Self::All(c) => c,
        }
    }
}

/// What a step chains to: a step, and its branch number when it starts an `in_parallel:`
/// branch.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    pred: Option<u32>,
    branch: Option<u32>,
}

impl Link {
    fn after(seq: u32) -> Self {
        Self {
            pred: Some(seq),
            branch: None,
        }
    }
}

/// The static shape of a job's key chain.
#[derive(Debug, Default)]
pub struct Chain {
    prev: HashMap<u32, Link>,
    composite: HashMap<u32, Composite>,
}

impl Chain {
    /// The chain of a job.
    pub fn of(job: &Job, outline: &Outline) -> Self {
        let mut c = Self::default();
        let last = c.walk(&job.plan, Link::default(), outline);
        for (_, hook) in job.hooks() {
            let link = Link {
                pred: last,
                branch: None,
            };
            c.walk(std::slice::from_ref(hook), link, outline);
        }
        c
    }

    fn walk(&mut self, steps: &[At<Step>], first: Link, outline: &Outline) -> Option<u32> {
        let mut link = first;
        for s in steps {
            let Some(seq) = outline.entry(s).map(|e| e.seq) else {
                continue;
            };
            self.prev.insert(seq, link);
            let seqs = |list: &[At<Step>]| -> Vec<u32> {
                list.iter()
                    .filter_map(|c| outline.entry(c).map(|e| e.seq))
                    .collect()
            };
            match &s.kind {
                StepKind::Do(children) => {
                    self.walk(children, link, outline);
                    self.composite.insert(seq, Composite::Last(seqs(children)));
                }
                StepKind::InParallel(p) => {
                    for (i, child) in p.steps().iter().enumerate() {
                        let branch = Link {
                            pred: link.pred,
                            branch: Some(u32::try_from(i).unwrap_or(u32::MAX)),
                        };
                        self.walk(std::slice::from_ref(child), branch, outline);
                    }
                    self.composite.insert(seq, Composite::All(seqs(p.steps())));
                }
                // An ensemble's members (and its judge, never replayed) are branches
                // like a race's.
                StepKind::Race(_) | StepKind::Ensemble(_) => {
                    let children = s.children();
                    for (i, child) in children.iter().enumerate() {
                        let branch = Link {
                            pred: link.pred,
                            branch: Some(u32::try_from(i).unwrap_or(u32::MAX)),
                        };
                        self.walk(std::slice::from_ref(*child), branch, outline);
                    }
                    let all = children
                        .iter()
                        .filter_map(|c| outline.entry(c).map(|e| e.seq))
                        .collect();
                    self.composite.insert(seq, Composite::All(all));
                }
                StepKind::Try(inner) => {
                    self.walk(std::slice::from_ref(inner), link, outline);
                    self.composite
                        .insert(seq, Composite::Last(seqs(std::slice::from_ref(inner))));
                }
                _ => {}
            }
            for (_, hook) in s.hooks() {
                self.walk(std::slice::from_ref(hook), Link::after(seq), outline);
            }
            link = Link::after(seq);
        }
        link.pred
    }

    /// The key of step `seq`, given the keys leaf steps got so far.
    pub fn key_of(&self, seq: u32, leaves: &HashMap<u32, Digest>) -> Digest {
        if let Some(k) = leaves.get(&seq) {
            return *k;
        }
        match self.composite.get(&seq) {
            Some(Composite::Last(children)) => children
                .iter()
                .rev()
                .map(|c| self.key_of(*c, leaves))
                .find(|k| *k != Digest::ZERO)
                .unwrap_or(Digest::ZERO),
            Some(Composite::All(children)) => {
                let mut h = blake3::Hasher::new();
                h.update(b"in_parallel\0");
                for c in children {
                    h.update(&self.key_of(*c, leaves).0);
                }
                h.finalize().into()
            }
            None => Digest::ZERO,
        }
    }

    /// Step `seq` and every step whose key chains to it, directly or through the
    /// steps after it: what `--rerun` runs again. A container holding one of them counts
    /// (its key is made of its children's), so what follows the container counts too.
    pub fn dependents(&self, seq: u32) -> HashSet<u32> {
        let mut set = HashSet::from([seq]);
        loop {
            let before = set.len();
            let holders: Vec<u32> = self
                .composite
                .iter()
                .filter(|(_, c)| c.children().iter().any(|s| set.contains(s)))
                .map(|(k, _)| *k)
                .collect();
            set.extend(holders);
            let followers: Vec<u32> = self
                .prev
                .iter()
                .filter(|(_, link)| link.pred.is_some_and(|p| set.contains(&p)))
                .map(|(k, _)| *k)
                .collect();
            set.extend(followers);
            if set.len() == before {
                return set;
            }
        }
    }

    /// The key step `seq` chains to.
    pub fn prev_key(&self, seq: u32, leaves: &HashMap<u32, Digest>) -> Digest {
        let link = self.prev.get(&seq).copied().unwrap_or_default();
        let base = link.pred.map_or(Digest::ZERO, |p| self.key_of(p, leaves));
        match link.branch {
            None => base,
            Some(i) => {
                let mut h = blake3::Hasher::new();
                h.update(b"branch\0");
                h.update(&base.0);
                h.update(&i.to_le_bytes());
                h.finalize().into()
            }
        }
    }
}

/// The key of an `across:` step: its cells' keys in order (`None`: a cell that got no
/// key, never admitted), so a step after the block chains to every cell.
pub fn fold_cells(keys: impl IntoIterator<Item = Option<Digest>>) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(b"across\0");
    for k in keys {
        h.update(&k.unwrap_or(Digest::ZERO).0);
    }
    h.finalize().into()
}
