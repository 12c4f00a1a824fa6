//! `treadle plan`: which steps a run would execute and which it would replay from the
//! cache, and for each that would run, which part of its key changed since it last
//! succeeded.
//!
//! The plan walks the job as a run would, without running anything: a step's inputs are
//! known when the steps that make them would be replayed (their digests are recorded), and
//! unknown when those steps would run; a `get` asks its remote for the branch's commit.
//! Verdict routes are not followed: every step is listed in plan order.

use std::collections::{BTreeMap, HashMap};

/// An `across:` cell's values, by variable.
type Vars = BTreeMap<String, String>;

use super::chain::Chain;
use super::digest::Digest;
use super::key::{self, KeyParts};
use super::records::Records;
use crate::agent::AgentStep;
use crate::pipeline::flow;
use crate::pipeline::outline::{Entry, Outline};
use crate::pipeline::{At, Job, Kind, Loaded, Step, StepKind};
use crate::resource::{ResourceError, ops};

/// What a run would do with one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// Taken from the cache, recorded by this run.
    Cached(u64),
    /// Run, for these reasons.
    Run(Vec<String>),
    /// A container: its steps are listed under it.
    Container,
    /// A hook: only when its step ends that way.
    Hook,
}

/// One line of the plan.
#[derive(Debug, Clone)]
pub struct Line {
    /// Nesting depth.
    pub depth: u32,
    /// Display name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// What would happen.
    pub verdict: Planned,
}

struct Walk<'a> {
    loaded: &'a Loaded,
    job: &'a Job,
    outline: Outline,
    chain: Chain,
    records: Option<&'a Records>,
    keys: HashMap<u32, Digest>,
    /// Artifact name → digest (`None`: remade by a step that runs).
    artifacts: HashMap<String, Option<Digest>>,
    lines: Vec<Line>,
}

/// The plan of `job`, against the cache in `records` (`None`: nothing recorded yet).
pub fn plan(loaded: &Loaded, job: &Job, records: Option<&Records>) -> Vec<Line> {
    let outline = Outline::of(job);
    let chain = Chain::of(job, &outline);
    let mut w = Walk {
        loaded,
        job,
        outline,
        chain,
        records,
        keys: HashMap::new(),
        artifacts: HashMap::new(),
        lines: Vec::new(),
    };
    w.steps(&job.plan, false);
    for (_, hook) in job.hooks() {
        w.steps(std::slice::from_ref(hook), true);
    }
    w.lines
}

impl Walk<'_> {
    fn steps(&mut self, steps: &[At<Step>], hook: bool) {
        for s in steps {
            self.step(s, hook);
        }
    }

    fn step(&mut self, s: &At<Step>, hook: bool) {
        let Some(entry) = self.outline.entry(s).cloned() else {
            return;
        };
        let verdict = match s.kind() {
            Ok(
                StepKind::Do(_)
                | StepKind::InParallel(_)
                | StepKind::Try(_)
                | StepKind::Race(_)
                | StepKind::Ensemble(_),
            ) => Planned::Container,
            _ if hook => Planned::Hook,
            _ if s.across.is_some() => return self.across(s, &entry),
            _ => self.leaf(s, entry.seq, &entry.path, None),
        };
        self.lines.push(Line {
            depth: entry.depth,
            name: entry.name.clone(),
            kind: entry.kind,
            verdict,
        });
        for child in s.children() {
            self.step(child, hook);
        }
        for (_, h) in s.hooks() {
            self.step(h, true);
        }
    }

    /// An `across:` step: one line per cell of a matrix written in the file, each judged
    /// on its own key; a `from_file:` matrix is one line (its width is known only when it
    /// runs).
    fn across(&mut self, s: &At<Step>, entry: &Entry) {
        let Some(axes) = flow::static_axes(s) else {
            let why = "its cells come from a file an earlier step writes".to_owned();
            self.lines.push(Line {
                depth: entry.depth,
                name: entry.name.clone(),
                kind: entry.kind,
                verdict: Planned::Run(vec![why]),
            });
            // What follows chains to cells nobody can know yet.
            let unknown = blake3::hash(format!("unknown {}", entry.seq).as_bytes()).into();
            self.keys.insert(entry.seq, unknown);
            return;
        };
        let mut keys = Vec::new();
        for (i, (name, vars)) in flow::cells(s, &axes).into_iter().enumerate() {
            let path = format!("{}#{i}", entry.path);
            let (verdict, key) = self.judge(s, entry.seq, &path, Some(&vars));
            keys.push(key);
            self.lines.push(Line {
                depth: entry.depth,
                name,
                kind: entry.kind,
                verdict,
            });
        }
        for o in super::lookup::produced(s) {
            self.artifacts.insert(o, None);
        }
        self.keys.insert(entry.seq, super::chain::fold_cells(keys));
        for (_, h) in s.hooks() {
            self.step(h, true);
        }
    }

    fn leaf(&mut self, s: &At<Step>, seq: u32, path: &str, cell: Option<&Vars>) -> Planned {
        let outputs = super::lookup::produced(s);
        let (verdict, key) = self.judge(s, seq, path, cell);
        // A key that cannot be known stands for "different from anything recorded".
        let key = key.unwrap_or_else(|| blake3::hash(format!("unknown {seq}").as_bytes()).into());
        self.keys.insert(seq, key);
        if let Planned::Cached(_) = verdict {
            let recorded = self
                .records
                .and_then(|r| r.entry(&key).ok().flatten())
                .map(|o| o.outputs)
                .unwrap_or_default();
            for o in recorded {
                self.artifacts.insert(o.name, Some(o.digest));
            }
        } else {
            for o in outputs {
                self.artifacts.insert(o, None);
            }
        }
        verdict
    }

    fn judge(
        &self,
        s: &At<Step>,
        seq: u32,
        path: &str,
        cell: Option<&Vars>,
    ) -> (Planned, Option<Digest>) {
        let mut inputs = std::collections::BTreeMap::new();
        let mut unknown = Vec::new();
        for i in &s.inputs {
            match self.artifacts.get(&i.value) {
                Some(Some(d)) => {
                    inputs.insert(i.value.clone(), *d);
                }
                _ => unknown.push(format!("input `{}` is remade by a step that runs", i.value)),
            }
        }
        let version = match s.kind() {
            Ok(StepKind::Get(res)) => match self.version(&res.value) {
                Ok(v) => Some(v),
                Err(e) => return (Planned::Run(vec![e.to_string()]), None),
            },
            _ => None,
        };
        let agent = match s.kind() {
            Ok(StepKind::Agent(_)) => match AgentStep::build(self.loaded, s) {
                Ok(a) => Some(a),
                Err(e) => return (Planned::Run(vec![e.to_string()]), None),
            },
            _ => None,
        };
        let config = match key::config(self.loaded, s, version.as_deref(), agent.as_ref()) {
            Ok(c) => key::config_digest(&key::with_cell(c, cell)),
            Err(e) => return (Planned::Run(vec![e.to_string()]), None),
        };
        let parts = KeyParts {
            kind: Kind::of(s).to_string(),
            config,
            inputs,
            prev: self.chain.prev_key(seq, &self.keys),
        };
        let key = parts.key();
        if !unknown.is_empty() {
            return (Planned::Run(unknown), None);
        }
        let Some(records) = self.records else {
            return (Planned::Run(vec!["never ran".to_owned()]), Some(key));
        };
        let replayable = match cell {
            Some(_) => crate::cache::lookup::cell_replayable(s),
            None => crate::cache::lookup::replayable(s),
        };
        if replayable && let Ok(Some(o)) = records.entry(&key) {
            return (Planned::Cached(o.run), Some(key));
        }
        let mut why = match records.last(&self.job.name.value, path) {
            Ok(Some(old)) => parts.changes(&old),
            _ => vec!["never succeeded".to_owned()],
        };
        if why.is_empty() {
            why.push(match s.kind() {
                _ if s.volatile => "volatile: never replayed".to_owned(),
                _ if s.when.is_some() => "a guarded step is never replayed".to_owned(),
                _ if s.across.is_some() && !s.outputs.is_empty() => {
                    "a cell of a collecting matrix is never replayed".to_owned()
                }
                Ok(StepKind::Put(_)) => "a put is never replayed".to_owned(),
                Ok(StepKind::Approval) => "an approval is never replayed".to_owned(),
                Ok(StepKind::Input) => "a question is never replayed".to_owned(),
                _ => "unchanged, but its cache entry was evicted or is corrupt".to_owned(),
            });
        }
        (Planned::Run(why), Some(key))
    }

    fn version(&self, resource: &str) -> Result<String, ResourceError> {
        ops::latest(&ops::source(self.loaded, resource)?)
    }
}

/// The plan as text, one line per step.
pub fn render(job: &str, lines: &[Line]) -> String {
    let mut out = format!("job {job}\n");
    for l in lines {
        let what = match &l.verdict {
            Planned::Cached(run) => format!("cached (from run {run})"),
            Planned::Run(why) => format!("would run: {}", why.join("; ")),
            Planned::Container => String::new(),
            Planned::Hook => "when its hook fires".to_owned(),
        };
        out.push_str(&format!(
            "  {}{} [{}] {what}\n",
            "  ".repeat(l.depth as usize),
            l.name,
            l.kind
        ));
    }
    out
}
