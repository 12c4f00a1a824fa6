//! What one walk of the plan knows so far: the keys leaves got (and which are guesses),
//! artifact digests, senders' decisions, and from them what a leaf's key is made of.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::judge::Known;
use crate::cache::chain::Chain;
use crate::cache::digest::Digest;
use crate::cache::key::{self, Decision, Delivered};
use crate::cache::records::Records;
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded, Step, StepKind};
use crate::resource::ResourceError;

/// What every walk of one job shares.
pub(super) struct Shared<'a> {
    pub loaded: &'a Loaded,
    pub job: &'a Job,
    pub outline: Outline,
    pub chain: Chain,
    pub records: Option<&'a Records>,
    /// A `get`'s version by resource, asked once (the error shared, as every `get` of the
    /// resource is told it).
    pub versions: std::cell::RefCell<HashMap<String, Result<String, Arc<ResourceError>>>>,
}

impl Shared<'_> {
    /// A git resource's version (its branch's commit); an error for another type, whose
    /// version only its `check` knows.
    fn version(&self, resource: &str) -> Result<String, Arc<ResourceError>> {
        if let Some(v) = self.versions.borrow().get(resource) {
            return v.clone();
        }
        let v = crate::resource::ops::source(self.loaded, resource)
            .and_then(|src| crate::resource::ops::latest(&src))
            .map_err(Arc::new);
        self.versions
            .borrow_mut()
            .insert(resource.to_owned(), v.clone());
        v
    }
}

/// What a sender's decision is known to be.
#[derive(Clone)]
pub(super) enum Fact {
    /// Recorded (the sender would be replayed).
    Known(Decision),
    /// This walk's choice of verdict for a sender that runs (its note is not known).
    Verdict(String),
    /// Made by a step that runs.
    Unknown,
}

/// One walk's knowledge.
#[derive(Default)]
pub(super) struct Facts {
    /// Leaf keys by seq (guesses for the seqs in `unsure`).
    pub keys: HashMap<u32, Digest>,
    pub unsure: HashSet<u32>,
    /// Artifact digests (`None`: remade by a step that runs).
    pub artifacts: HashMap<String, Option<Digest>>,
    /// Senders' decisions by step name.
    pub decisions: HashMap<String, Fact>,
}

impl Facts {
    /// What the plan knows of a leaf's facts here.
    pub(super) fn known(
        &self,
        sh: &Shared<'_>,
        step: &Step,
        seq: u32,
        cell: Option<BTreeMap<String, String>>,
    ) -> Known {
        let mut k = Known {
            inputs: BTreeMap::new(),
            unsure_inputs: Vec::new(),
            missing: Vec::new(),
            prev: self.prev(&sh.chain, seq, 0),
            prev_sure: self.prev(&sh.chain, seq, 1) == self.prev(&sh.chain, seq, 2),
            delivered: Vec::new(),
            delivered_sure: true,
            version: None,
            cell,
        };
        let all = step
            .inputs
            .iter()
            .any(|i| i.value == crate::pipeline::resource_type::ALL_INPUTS);
        let mut names: Vec<String> = match all {
            true => self.artifacts.keys().cloned().collect(),
            false => step.inputs.iter().map(|i| i.value.clone()).collect(),
        };
        names.sort();
        for name in names {
            match self.artifacts.get(&name) {
                Some(Some(d)) => {
                    k.inputs.insert(name, *d);
                }
                Some(None) => k.unsure_inputs.push(name),
                None => k.missing.push(name),
            }
        }
        k.delivered = self.delivered(step, &mut k.delivered_sure);
        if let StepKind::Get(crate::pipeline::GetStep { resource: res, .. }) = &step.kind {
            k.version = Some(sh.version(&res.value));
        }
        k
    }

    /// The key of the step before `seq`: `salt` 0 with this walk's guesses, 1 and 2 with
    /// unknown keys replaced by two different marks (equal only when it is certain).
    fn prev(&self, chain: &Chain, seq: u32, salt: u8) -> Digest {
        if salt == 0 {
            return chain.prev_key(seq, &self.keys);
        }
        let mut keys = self.keys.clone();
        for s in &self.unsure {
            let mark = blake3::hash(format!("unknown {s} {salt}").as_bytes());
            keys.insert(*s, mark.into());
        }
        chain.prev_key(seq, &keys)
    }

    /// What `step` reads through `context: { from }`; `sure` turns false when a decision
    /// it reads is made by a step that runs.
    fn delivered(&self, step: &Step, sure: &mut bool) -> Vec<Delivered> {
        let levels: HashMap<&str, &str> = step
            .context
            .iter()
            .flat_map(|c| c.value.from.iter())
            .map(|(s, l)| (s.as_str(), l.value.as_str()))
            .collect();
        let unsure = std::cell::Cell::new(false);
        let got = key::delivered(step, |sender| match self.decisions.get(sender)? {
            Fact::Known(d) => Some(d.clone()),
            Fact::Verdict(v) => {
                if levels.get(sender).is_some_and(|l| *l != "verdict") {
                    unsure.set(true);
                }
                Some(Decision {
                    verdict: v.clone(),
                    ..Decision::default()
                })
            }
            Fact::Unknown => {
                unsure.set(true);
                Some(Decision::default())
            }
        });
        *sure = !unsure.get();
        got
    }
}
