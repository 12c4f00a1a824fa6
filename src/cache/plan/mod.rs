//! `treadle plan`: which steps a run would execute, which it would replay from the cache
//! and which it would skip, and for each that would run, which part of its key changed
//! since it last succeeded.
//!
//! The plan walks the job as a run would, without running anything (`walk.rs`): routes,
//! `do:` and `try:`, hooks by how their step ends, `when:` guards and `across:` cells.
//! Each leaf's key is computed by the function the run uses
//! ([`crate::cache::key::step_key`]) from what the plan knows: an input's digest when the
//! step that makes it would be replayed, a decision when its sender would be. A cached
//! agent step's recorded verdict is followed; where a verdict (or a failure a route
//! catches) is only made while the run goes, every alternative is walked and a step that
//! goes differently in them is listed with its cases ("runs if `reviewer` says reject").
//!
//! * `lines.rs`: what the plan says of a step, as text and JSON;
//! * `walk.rs`: one walk, under a given choice at each decision;
//! * `facts.rs`: what a walk knows so far (keys, digests, decisions) and so what a leaf's
//!   key is made of;
//! * `judge.rs`: one leaf's key facts and the cache's answer.

mod facts;
mod judge;
mod lines;
mod walk;

use std::collections::HashMap;

pub use lines::{Case, Cond, Line, Planned, render, to_json};

use super::chain::Chain;
use super::records::Records;
use crate::pipeline::outline::{Outline, cell_path};
use crate::pipeline::{At, Job, Loaded, Step, flow_keys};

/// The most walks one plan takes (each a combination of decisions only a run makes).
const MAX_WALKS: usize = 256;

/// The plan of `job`, against the cache in `records` (`None`: nothing recorded yet).
pub fn plan(loaded: &Loaded, job: &Job, records: Option<&Records>) -> Vec<Line> {
    let outline = Outline::of(job);
    let chain = Chain::of(job, &outline);
    let shared = facts::Shared {
        loaded,
        job,
        outline,
        chain,
        records,
        versions: Default::default(),
    };
    let mut lines = slots(job, &shared.outline);
    // Per line, what each walk said, with the conditions it had taken by then.
    let mut seen: Vec<Vec<(Vec<Cond>, Planned)>> = vec![Vec::new(); lines.len()];
    let mut script = Some(Vec::new());
    let mut walks = 0;
    while let Some(s) = script.take() {
        let mut w = walk::Walk::new(&shared, s);
        w.job();
        for (line, seen) in lines.iter().zip(seen.iter_mut()) {
            let (state, n) = w
                .states
                .get(&line.path)
                .cloned()
                .unwrap_or((Planned::Skipped("not reached".to_owned()), w.conds.len()));
            seen.push((w.conds[..n].to_vec(), state));
        }
        walks += 1;
        if walks < MAX_WALKS {
            script = w.choices.next();
        }
    }
    for (line, seen) in lines.iter_mut().zip(seen) {
        line.verdict = merge(seen);
    }
    lines
}

/// One line per outline entry, and one per cell of a matrix written in the file.
fn slots(job: &Job, outline: &Outline) -> Vec<Line> {
    fn visit<'j>(s: &'j At<Step>, outline: &Outline, into: &mut HashMap<u32, &'j At<Step>>) {
        if let Some(e) = outline.entry(s) {
            into.insert(e.seq, s);
        }
        for c in s.children() {
            visit(c, outline, into);
        }
        for (_, h) in s.hooks() {
            visit(h, outline, into);
        }
    }
    let mut steps = HashMap::new();
    for s in job.plan.iter().chain(job.hooks().map(|(_, h)| h)) {
        visit(s, outline, &mut steps);
    }
    let mut out = Vec::new();
    for e in &outline.entries {
        let line = |path: String, name: String| Line {
            seq: e.seq,
            path,
            depth: e.depth,
            name,
            kind: e.kind,
            verdict: Planned::Container,
        };
        let cells = steps
            .get(&e.seq)
            .filter(|s| s.across.is_some())
            .and_then(|s| flow_keys::static_axes(s).map(|axes| flow_keys::cells(s, &axes)));
        match cells {
            Some(cells) => {
                for ((name, _), i) in cells.into_iter().zip(0u32..) {
                    out.push(line(cell_path(&e.path, i), name));
                }
            }
            None => out.push(line(e.path.clone(), e.name.clone())),
        }
    }
    out
}

/// What one line is across every walk: the same in all, or its cases.
fn merge(seen: Vec<(Vec<Cond>, Planned)>) -> Planned {
    let mut cases: Vec<(Planned, Vec<Vec<Cond>>)> = Vec::new();
    for (conds, state) in seen {
        match cases.iter_mut().find(|(s, _)| same(s, &state)) {
            Some((_, when)) => {
                if !when.contains(&conds) {
                    when.push(conds);
                }
            }
            None => cases.push((state, vec![conds])),
        }
    }
    if cases.len() == 1 {
        return cases.remove(0).0;
    }
    let cases = cases
        .into_iter()
        .map(|(state, when)| Case {
            when,
            then: Box::new(state),
        })
        .collect();
    Planned::Depends(cases)
}

/// Whether two walks say the same of a line (the reasons a step runs or is skipped may
/// differ).
fn same(a: &Planned, b: &Planned) -> bool {
    match (a, b) {
        (Planned::Run(_), Planned::Run(_)) | (Planned::Skipped(_), Planned::Skipped(_)) => true,
        _ => a == b,
    }
}
