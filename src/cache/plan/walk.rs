//! One walk of a job as the run would take it, without running anything: the routes
//! taken after each step (`run::job`), `do:` stopping at a route, `try:`, hooks by how
//! their step ends, `when:` guards and `across:` cells, with the keys the run would give
//! each leaf. Where only the run can decide (a verdict of a step that runs, a failure a
//! route catches), the walk takes the alternative its [`Choices`] name and says so in
//! its conditions; `super::plan` walks every combination and merges them.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::facts::{Fact, Facts, Shared};
use super::judge::{Judged, judge};
use super::lines::{Case, Cond, Planned};
use crate::cache::chain::fold_cells;
use crate::cache::digest::Digest;
use crate::cache::key::Decision;
use crate::cache::lookup::produced;
use crate::cache::records::SuccessRecord;
use crate::pipeline::outline::{Entry, cell_path};
use crate::pipeline::{At, Step, StepKind, flow_keys};

/// The alternatives one walk takes where only the run decides.
#[derive(Debug, Default, Clone)]
pub(super) struct Choices {
    /// The alternative to take at each decision, in order (past its end: the first).
    pub script: Vec<usize>,
    /// The alternative taken at each decision met, and how many there were.
    pub taken: Vec<(usize, usize)>,
}

impl Choices {
    fn pick(&mut self, count: usize) -> usize {
        let i = self.script.get(self.taken.len()).copied().unwrap_or(0);
        self.taken.push((i, count));
        i
    }

    /// The script of the next walk, depth first; `None` after the last.
    pub(super) fn next(&self) -> Option<Vec<usize>> {
        let k = self.taken.iter().rposition(|(i, n)| i + 1 < *n)?;
        let mut script: Vec<usize> = self.taken[..k].iter().map(|(i, _)| *i).collect();
        script.push(self.taken[k].0 + 1);
        Some(script)
    }
}

/// How a step ended in this walk.
#[derive(Clone, Default)]
struct Out {
    failed: bool,
    /// A failure a `try:` tolerated (routes still see it).
    masked: bool,
    route: Option<String>,
    /// Whether the walk knows how it ended without a choice (a replayed step).
    sure: bool,
}

/// One walk.
pub(super) struct Walk<'s, 'a> {
    sh: &'s Shared<'a>,
    pub choices: Choices,
    /// The conditions this walk took so far.
    pub conds: Vec<Cond>,
    /// What each line got, by outline path, with how many conditions it followed.
    pub states: HashMap<String, (Planned, usize)>,
    facts: Facts,
    visited: HashSet<String>,
    steps: usize,
}

/// How many steps one walk takes before it stops following a loop.
const MAX_STEPS_PER_ENTRY: usize = 4;

impl<'s, 'a> Walk<'s, 'a> {
    pub(super) fn new(sh: &'s Shared<'a>, script: Vec<usize>) -> Self {
        Self {
            sh,
            choices: Choices {
                script,
                taken: Vec::new(),
            },
            conds: Vec::new(),
            states: HashMap::new(),
            facts: Facts::default(),
            visited: HashSet::new(),
            steps: 0,
        }
    }

    fn note(&mut self, path: &str, state: Planned) {
        let n = self.conds.len();
        self.states.entry(path.to_owned()).or_insert((state, n));
    }

    /// Notes `state` for `step` and everything under it and its hooks.
    fn note_tree(&mut self, step: &At<Step>, state: &Planned) {
        let Some(entry) = self.sh.outline.entry(step).cloned() else {
            return;
        };
        match flow_keys::static_axes(step).filter(|_| step.across.is_some()) {
            Some(axes) => {
                for (_, i) in flow_keys::cells(step, &axes).iter().zip(0u32..) {
                    self.note(&cell_path(&entry.path, i), state.clone());
                }
            }
            None => self.note(&entry.path, state.clone()),
        }
        for child in step.children() {
            self.note_tree(child, state);
        }
        for (_, h) in step.hooks() {
            self.note_tree(h, state);
        }
    }

    /// Walks the job: its plan, following routes as `run::job` does, then its hooks.
    pub(super) fn job(&mut self) {
        let plan = &self.sh.job.plan;
        let mut visits = vec![0u32; plan.len()];
        let limit = MAX_STEPS_PER_ENTRY * self.sh.outline.entries.len().max(1);
        let mut i = 0;
        let mut failed = false;
        while i < plan.len() {
            if plan[i].is_every_get() {
                // From here on the run goes once per version the job has not taken yet,
                // which only the resource's check can tell.
                let c = Cond::Other("a version this job has not taken yet is left".into());
                for s in &plan[i..] {
                    self.note_tree(s, &depends(c.clone(), Planned::Run(Vec::new())));
                    self.unknown_tree(s);
                }
                break;
            }
            visits[i] += 1;
            if plan[i]
                .max_visits
                .as_ref()
                .is_some_and(|m| visits[i] > m.value)
            {
                failed = true;
                break;
            }
            self.steps += 1;
            if self.steps > limit {
                // A loop the walk cannot see the end of: what follows is not known.
                break;
            }
            let d = self.exec(&plan[i]);
            let real_failed = d.failed || d.masked;
            let target = if real_failed {
                plan[i].failure_route().map(|t| t.value.clone())
            } else {
                d.route.clone().or_else(|| {
                    let to = plan[i].to.as_ref()?;
                    to.value.success.as_ref().map(|t| t.value.clone())
                })
            };
            if d.failed && target.is_none() {
                failed = true;
                break;
            }
            match target.as_deref() {
                None | Some("next") => i += 1,
                Some(t) => match plan.iter().position(|s| s.display_name() == t) {
                    Some(j) => {
                        let why = format!(
                            "a route goes past it (`{}` to `{t}`)",
                            plan[i].display_name()
                        );
                        for s in plan.iter().take(j).skip(i + 1) {
                            self.note_tree(s, &Planned::Skipped(why.clone()));
                        }
                        i = j;
                    }
                    None => break,
                },
            }
        }
        self.job_hooks(failed);
    }

    fn job_hooks(&mut self, failed: bool) {
        let job = self.sh.job;
        for (name, hook) in job.hooks() {
            match (name, failed) {
                ("on_success", false) | ("on_failure", true) | ("ensure", _) => {
                    self.exec(hook);
                }
                ("on_failure" | "on_error", false) => {
                    let c = Cond::Other("the job fails".to_owned());
                    self.note_tree(hook, &depends(c, Planned::Run(Vec::new())));
                }
                _ => self.note_tree(hook, &Planned::Skipped("its hook does not fire".into())),
            }
        }
    }

    /// A step with its guard and hooks, as `run::exec` runs it.
    fn exec(&mut self, step: &At<Step>) -> Out {
        let Some(entry) = self.sh.outline.entry(step).cloned() else {
            return Out::default();
        };
        if step.across.is_some() {
            return self.across(step, &entry);
        }
        if step.when.is_some() {
            // The guard runs only in the run: the step (and all it holds) may run or not,
            // and nothing after it can know its key or its outputs.
            self.note_tree(step, &depends(Cond::Guard, Planned::Run(Vec::new())));
            self.unknown_tree(step);
            return Out::default();
        }
        let out = match &step.kind {
            StepKind::Do(children) => {
                self.note(&entry.path, Planned::Container);
                self.sequence(children)
            }
            StepKind::Try(inner) => {
                self.note(&entry.path, Planned::Container);
                let d = self.exec(inner);
                Out {
                    failed: false,
                    masked: d.failed,
                    ..d
                }
            }
            StepKind::InParallel(_) | StepKind::Race(_) | StepKind::Ensemble(_) => {
                self.note(&entry.path, Planned::Container);
                let mut sure = true;
                for child in step.children() {
                    sure &= self.exec(child).sure;
                }
                // An ensemble routes on the decision among its votes.
                match step.routes().is_empty() {
                    true => Out {
                        sure,
                        ..Out::default()
                    },
                    false => self.decide(step, &entry),
                }
            }
            StepKind::LoadVar { .. } => {
                self.note(
                    &entry.path,
                    Planned::Run(vec!["reads a var: never cached".into()]),
                );
                Out::default()
            }
            _ => self.leaf(step, &entry),
        };
        self.hooks(step, &out);
        out
    }

    fn sequence(&mut self, steps: &[At<Step>]) -> Out {
        let mut sure = true;
        for (i, s) in steps.iter().enumerate() {
            let d = self.exec(s);
            sure &= d.sure;
            if d.failed || d.route.is_some() {
                let why = match &d.route {
                    Some(t) => format!("a route leaves its block (to `{t}`)"),
                    None => "a step before it fails".to_owned(),
                };
                for rest in &steps[i + 1..] {
                    self.note_tree(rest, &Planned::Skipped(why.clone()));
                }
                return d;
            }
        }
        Out {
            sure,
            ..Out::default()
        }
    }

    /// The hook that fires for how the step ended, then `ensure`.
    fn hooks(&mut self, step: &At<Step>, out: &Out) {
        let name = step.display_name();
        for (which, hook) in step.hooks() {
            match which {
                "on_success" if !out.failed => {
                    self.exec(hook);
                }
                "on_failure" if out.failed => {
                    self.exec(hook);
                }
                "ensure" => {
                    self.exec(hook);
                }
                "on_failure" | "on_error" if !out.sure => {
                    let c = match which {
                        "on_failure" => Cond::Fails { step: name.clone() },
                        _ => Cond::Other(format!("`{name}` errors")),
                    };
                    self.note_tree(hook, &depends(c, Planned::Run(Vec::new())));
                }
                _ => {
                    let why = format!("`{name}` does not end the way its `{which}` needs");
                    self.note_tree(hook, &Planned::Skipped(why));
                }
            }
        }
    }

    /// An `across:` step: each cell of a matrix written in the file, with its own key.
    fn across(&mut self, step: &At<Step>, entry: &Entry) -> Out {
        let Some(axes) = flow_keys::static_axes(step) else {
            let c = Cond::Other("its cells come from a file an earlier step writes".into());
            self.note(&entry.path, depends(c, Planned::Run(Vec::new())));
            self.unknown_tree(step);
            return Out::default();
        };
        let mut keys = Vec::new();
        let mut sure = true;
        for ((name, vars), i) in flow_keys::cells(step, &axes).into_iter().zip(0u32..) {
            let cell = entry.cell(i, name);
            if step.when.is_some() {
                self.note(&cell.path, depends(Cond::Guard, Planned::Run(Vec::new())));
                keys.push(None);
                sure = false;
                continue;
            }
            let (out, key, key_sure) = self.judge_leaf(step, &cell, Some(vars));
            keys.push(key);
            sure &= key_sure;
            self.hooks(step, &out);
        }
        self.facts.keys.insert(entry.seq, fold_cells(keys));
        if !sure {
            self.facts.unsure.insert(entry.seq);
        }
        for o in produced(step) {
            self.facts.artifacts.insert(o, None);
        }
        Out::default()
    }

    /// A leaf step: its key, the cache's answer, what it makes and where it routes.
    fn leaf(&mut self, step: &At<Step>, entry: &Entry) -> Out {
        let (out, key, sure) = self.judge_leaf(step, entry, None);
        if let Some(k) = key {
            self.facts.keys.insert(entry.seq, k);
            if !sure {
                self.facts.unsure.insert(entry.seq);
            }
        }
        out
    }

    fn judge_leaf(
        &mut self,
        step: &At<Step>,
        entry: &Entry,
        cell: Option<BTreeMap<String, String>>,
    ) -> (Out, Option<Digest>, bool) {
        let first = self.visited.insert(entry.path.clone());
        let known = self.facts.known(self.sh, step, entry.seq, cell);
        let sh = self.sh;
        let leaf = judge(
            sh.loaded,
            sh.job,
            sh.records,
            step,
            &entry.path,
            &known,
            first,
        );
        let outputs = produced(step);
        let out = match leaf.judged {
            Judged::Cached(o) => {
                self.note(&entry.path, Planned::Cached(o.run));
                self.replayed(step, &o, &outputs)
            }
            Judged::CachedIf(o, conds, why) => {
                let case = |when: Vec<Vec<Cond>>, then| Case {
                    when,
                    then: Box::new(then),
                };
                let cases = vec![
                    case(vec![conds], Planned::Cached(o.run)),
                    case(Vec::new(), Planned::Run(why)),
                ];
                self.note(&entry.path, Planned::Depends(cases));
                self.ran(step, entry, &outputs)
            }
            Judged::Run(why) => {
                self.note(&entry.path, Planned::Run(why));
                self.ran(step, entry, &outputs)
            }
        };
        (out, leaf.key, leaf.sure)
    }

    /// What a replayed step leaves: its recorded outputs, its decision, its route.
    fn replayed(&mut self, step: &Step, o: &SuccessRecord, outputs: &[String]) -> Out {
        for name in outputs {
            let digest = o.outputs.iter().find(|t| t.name == *name).map(|t| t.digest);
            self.facts.artifacts.insert(name.clone(), digest);
        }
        if let Some(v) = &o.produced.verdict {
            let d = Decision {
                verdict: v.clone(),
                note: o.produced.note.clone(),
                tail: o.produced.stdout_tail.clone(),
            };
            self.facts
                .decisions
                .insert(step.display_name(), Fact::Known(d));
        }
        let route = o.produced.verdict.as_ref().and_then(|v| {
            step.routes()
                .into_iter()
                .find(|(name, _)| name == v)
                .map(|(_, t)| t.value.clone())
                .filter(|t| t != "next")
        });
        Out {
            route,
            sure: true,
            ..Out::default()
        }
    }

    /// What a step that runs leaves: outputs nobody knows yet, and its decision, a
    /// choice of this walk when it routes.
    fn ran(&mut self, step: &At<Step>, entry: &Entry, outputs: &[String]) -> Out {
        for name in outputs {
            self.facts.artifacts.insert(name.clone(), None);
        }
        self.facts
            .decisions
            .insert(step.display_name(), Fact::Unknown);
        if !step.routes().is_empty() {
            return self.decide(step, entry);
        }
        if step.failure_route().is_some() {
            let name = step.display_name();
            let fails = self.choices.pick(2) == 1;
            self.conds.push(match fails {
                true => Cond::Fails { step: name },
                false => Cond::Succeeds { step: name },
            });
            return Out {
                failed: fails,
                sure: true,
                ..Out::default()
            };
        }
        Out::default()
    }

    /// A verdict of a step that runs: one alternative per route target (and failure,
    /// when a route catches it).
    fn decide(&mut self, step: &At<Step>, entry: &Entry) -> Out {
        let name = entry.name.clone();
        let mut targets: Vec<(Option<String>, Vec<String>)> = Vec::new();
        for v in step.verdict_choices() {
            let t = step
                .routes()
                .into_iter()
                .find(|(n, _)| *n == v)
                .map(|(_, t)| t.value.clone())
                .filter(|t| t != "next");
            match targets.iter_mut().find(|(x, _)| *x == t) {
                Some((_, vs)) => vs.push(v),
                None => targets.push((t, vec![v])),
            }
        }
        let catches = step.failure_route().is_some();
        let count = targets.len() + usize::from(catches);
        if count == 0 {
            return Out::default();
        }
        let i = self.choices.pick(count);
        let Some((route, verdicts)) = targets.get(i).cloned() else {
            self.conds.push(Cond::Fails { step: name });
            return Out {
                failed: true,
                sure: true,
                ..Out::default()
            };
        };
        if let [one] = verdicts.as_slice() {
            self.facts
                .decisions
                .insert(name.clone(), Fact::Verdict(one.clone()));
        }
        self.conds.push(Cond::Says {
            step: name,
            verdict: verdicts.join(" or "),
        });
        Out {
            route,
            sure: true,
            ..Out::default()
        }
    }

    /// A step whose running only the run decides: nothing after it knows its keys or its
    /// outputs.
    fn unknown_tree(&mut self, step: &At<Step>) {
        if let Some(e) = self.sh.outline.entry(step) {
            let mark = blake3::hash(format!("unknown {}", e.seq).as_bytes()).into();
            self.facts.keys.insert(e.seq, mark);
            self.facts.unsure.insert(e.seq);
        }
        for o in produced(step) {
            self.facts.artifacts.insert(o, None);
        }
        self.facts
            .decisions
            .insert(step.display_name(), Fact::Unknown);
        for child in step.children() {
            self.unknown_tree(child);
        }
    }
}

/// A state that holds only under `cond`.
fn depends(cond: Cond, then: Planned) -> Planned {
    Planned::Depends(vec![Case {
        when: vec![vec![cond]],
        then: Box::new(then),
    }])
}

#[cfg(test)]
mod tests {
    use super::Choices;

    /// Walks a tree of decisions whose second level depends on the first: every leaf is
    /// reached once.
    #[test]
    fn choices_reach_every_combination_once() {
        let mut script = Some(Vec::new());
        let mut seen = Vec::new();
        while let Some(s) = script.take() {
            let mut c = Choices {
                script: s,
                taken: Vec::new(),
            };
            let first = c.pick(3);
            // After alternative 1 there is no second decision; after the others, two.
            let second = (first != 1).then(|| c.pick(2));
            seen.push((first, second));
            script = c.next();
        }
        assert_eq!(
            seen,
            [
                (0, Some(0)),
                (0, Some(1)),
                (1, None),
                (2, Some(0)),
                (2, Some(1))
            ]
        );
    }
}
