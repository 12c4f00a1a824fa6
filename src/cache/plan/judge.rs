//! One leaf step (or `across:` cell) of the plan: the facts its key is made of, as far as
//! the plan knows them, then whether the cache would replay it.
//!
//! The key comes from [`crate::cache::key::step_key`], the function the run calls. A
//! fact the plan cannot know yet (an input remade by a step that runs, a decision such a
//! step makes, a step before it whose key is itself unknown) is taken from the step's
//! last success: if the cache holds an entry for that key, the step is replayed exactly
//! when the unknown facts come out as they did then, and the plan says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::lines::Cond;
use crate::agent::AgentStep;
use crate::cache::digest::Digest;
use crate::cache::key::{self, Delivered, KeyFacts, KeyParts};
use crate::cache::records::{Records, SuccessRecord};
use crate::pipeline::{AgentCall, Job, Loaded, Step, StepKind};

/// What the plan knows of a leaf's facts.
pub(super) struct Known {
    /// Inputs whose digests are known.
    pub inputs: BTreeMap<String, Digest>,
    /// Inputs a step that runs remakes (their digests are not known yet).
    pub unsure_inputs: Vec<String>,
    /// Inputs no step before it made.
    pub missing: Vec<String>,
    /// The key of the step before it (a guess when `prev_sure` is false).
    pub prev: Digest,
    pub prev_sure: bool,
    /// What `context: { from }` delivers (a guess when `delivered_sure` is false).
    pub delivered: Vec<Delivered>,
    pub delivered_sure: bool,
    /// A `get`'s version, or why it cannot be known.
    pub version: Option<Result<String, std::sync::Arc<crate::resource::ResourceError>>>,
    /// The `across:` cell's values.
    pub cell: Option<BTreeMap<String, String>>,
}

/// The plan's verdict on a leaf.
pub(super) enum Judged {
    /// Replayed from this record.
    Cached(Box<SuccessRecord>),
    /// Replayed from this record if these come out as they did then, else run for the
    /// reasons given.
    CachedIf(Box<SuccessRecord>, Vec<Cond>, Vec<String>),
    /// Run, for these reasons.
    Run(Vec<String>),
}

/// A leaf's verdict and the key the plan expects it to have (`None`: it gets none, as an
/// input nobody made leaves it without one in the run).
pub(super) struct Leaf {
    pub judged: Judged,
    pub key: Option<Digest>,
    /// Whether the key is certain (a key certainly new is: it matches no record).
    pub sure: bool,
}

/// Judges one leaf at outline `path`; `first`: the first visit in this walk.
pub(super) fn judge(
    loaded: &Loaded,
    job: &Job,
    records: Option<&Records>,
    step: &Step,
    path: &str,
    known: &Known,
    first: bool,
) -> Leaf {
    let run = |why: Vec<String>| Leaf {
        judged: Judged::Run(why),
        key: None,
        sure: true,
    };
    if !known.missing.is_empty() {
        return run(known
            .missing
            .iter()
            .map(|i| format!("input `{i}` is made by no step before it"))
            .collect());
    }
    // Built as the run builds it, when the key asks for it.
    let agent = |call: &AgentCall| AgentStep::build(loaded, step, call).map(Arc::new);
    let last = records.and_then(|r| r.last(&job.name.value, path).ok().flatten());
    // A version the plan cannot ask for (a resource type's `check` runs only in a run) is
    // guessed as the one its last success fetched.
    let version_sure = !matches!(known.version, Some(Err(_)));
    let version = match &known.version {
        Some(Ok(v)) => Some(v.clone()),
        Some(Err(_)) => last
            .as_ref()
            .and_then(|l| records?.entry(&l.key()).ok().flatten())
            .and_then(|o| o.version),
        None => None,
    };
    // An unknown input is guessed as its last success saw it (else as nothing seen).
    let mut inputs = known.inputs.clone();
    for name in &known.unsure_inputs {
        let guess = last.as_ref().and_then(|l| l.inputs.get(name).copied());
        inputs.insert(name.clone(), guess.unwrap_or(Digest::ZERO));
    }
    let facts = KeyFacts {
        inputs,
        version: version.as_deref(),
        agent: &agent,
        cell: known.cell.as_ref(),
        delivered: &known.delivered,
        prev: known.prev,
    };
    let mut parts = match key::step_key(step, &facts) {
        Ok(p) => p,
        Err(e) => return run(vec![e.to_string()]),
    };
    let sure =
        known.unsure_inputs.is_empty() && known.prev_sure && known.delivered_sure && version_sure;
    let replayable = match known.cell {
        Some(_) => crate::cache::lookup::cell_replayable(step),
        None => crate::cache::lookup::replayable(step),
    };
    let mut unknown: Vec<Cond> = Vec::new();
    if !sure && let Some(old) = &last {
        // What the step would be if the unknown facts came out as last time.
        for name in &known.unsure_inputs {
            unknown.push(Cond::Repeats {
                what: format!("input `{name}` comes out"),
                run: 0,
            });
        }
        if !known.prev_sure {
            parts.prev = old.prev;
            unknown.push(Cond::Repeats {
                what: "the steps before it end".to_owned(),
                run: 0,
            });
        }
        if !version_sure {
            unknown.push(Cond::Repeats {
                what: "its resource's check reports the version it did".to_owned(),
                run: 0,
            });
        }
        if !known.delivered_sure {
            parts.context = old.context;
            unknown.push(Cond::Repeats {
                what: "the decisions it reads are".to_owned(),
                run: 0,
            });
        }
    }
    let mut key = parts.key();
    let mut sure = sure;
    if !sure && last.as_ref().is_none_or(|old| old.key() != key) {
        // What is known already differs from its last success: whatever the unknown
        // facts turn out to be, the key is new, and so is every key chained to it.
        key = blake3::hash(format!("a new key for {path}").as_bytes()).into();
        sure = true;
        unknown.clear();
    }
    let leaf = |judged| Leaf {
        judged,
        key: Some(key),
        sure,
    };
    if !first {
        return leaf(Judged::Run(vec![
            "a route came back to it: it runs again".to_owned(),
        ]));
    }
    let Some(records) = records else {
        return leaf(Judged::Run(vec!["never ran".to_owned()]));
    };
    let entry = if replayable {
        records.entry(&key).ok().flatten()
    } else {
        None
    };
    let why = reasons(step, &parts, last.as_ref(), known);
    match entry {
        Some(o) if unknown.is_empty() => leaf(Judged::Cached(Box::new(o))),
        Some(o) => {
            let conds = unknown
                .into_iter()
                .map(|c| match c {
                    Cond::Repeats { what, .. } => Cond::Repeats { what, run: o.run },
                    other => other,
                })
                .collect();
            leaf(Judged::CachedIf(Box::new(o), conds, why))
        }
        None => leaf(Judged::Run(why)),
    }
}

/// Why a step with no entry for its key runs.
fn reasons(step: &Step, parts: &KeyParts, last: Option<&KeyParts>, known: &Known) -> Vec<String> {
    let mut why: Vec<String> = known
        .unsure_inputs
        .iter()
        .map(|i| format!("input `{i}` is remade by a step that runs"))
        .collect();
    if !known.delivered_sure {
        why.push("it reads a decision made by a step that runs".to_owned());
    }
    if !known.prev_sure {
        why.push("the step before it runs, so its key is known only then".to_owned());
    }
    if !why.is_empty() {
        return why;
    }
    why = match last {
        Some(old) => parts.changes(old),
        None => vec!["never succeeded".to_owned()],
    };
    if why.is_empty() {
        why.push(match &step.kind {
            _ if step.volatile => "volatile: never replayed".to_owned(),
            _ if step.when.is_some() => "a guarded step is never replayed".to_owned(),
            _ if step.across.is_some() && !step.outputs.is_empty() => {
                "a cell of a collecting matrix is never replayed".to_owned()
            }
            StepKind::Put(_) => "a put is never replayed".to_owned(),
            StepKind::Approval { .. } => "an approval is never replayed".to_owned(),
            StepKind::Input(_) => "a question is never replayed".to_owned(),
            _ => "unchanged, but its cache entry was evicted or is corrupt".to_owned(),
        });
    }
    why
}
