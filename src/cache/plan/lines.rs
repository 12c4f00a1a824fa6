//! What `treadle plan` says of each step: the verdicts, the conditions a verdict may hang
//! on, and the plan as text and as JSON.

use serde_json::{Value, json};

use crate::pipeline::Kind;

/// What a run would do with one step (or one `across:` cell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// Taken from the cache, recorded by this run.
    Cached(u64),
    /// Run, for these reasons.
    Run(Vec<String>),
    /// Not reached: a route goes past it, or the hook does not fire.
    Skipped(String),
    /// A container: its steps are listed under it.
    Container,
    /// Decided only while the run goes: each case says when it holds.
    Depends(Vec<Case>),
}

/// One way a [`Planned::Depends`] step may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// What must happen first: any one of these lists, each of which must all hold
    /// (empty when the case hangs on something the step itself decides, see `then`).
    pub when: Vec<Vec<Cond>>,
    /// What happens to the step then.
    pub then: Box<Planned>,
}

/// Something only the run decides.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cond {
    /// Step `step` (by name) gives verdict `verdict`.
    Says { step: String, verdict: String },
    /// Step `step` fails.
    Fails { step: String },
    /// Step `step` succeeds.
    Succeeds { step: String },
    /// The step's `when:` guard passes.
    Guard,
    /// What the step reads comes out as in run `run` (an input remade by a step that
    /// runs, or a decision made by one).
    Repeats { what: String, run: u64 },
    /// Anything else, in words (a hook that fires on an error, a matrix from a file).
    Other(String),
}

impl std::fmt::Display for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Says { step, verdict } => write!(f, "`{step}` says {verdict}"),
            Self::Fails { step } => write!(f, "`{step}` fails"),
            Self::Succeeds { step } => write!(f, "`{step}` succeeds"),
            Self::Guard => f.write_str("its `when:` guard passes"),
            Self::Repeats { what, run } => write!(f, "{what} as in run {run}"),
            Self::Other(s) => f.write_str(s),
        }
    }
}

/// One line of the plan.
#[derive(Debug, Clone)]
pub struct Line {
    /// The step's place in the outline (a cell shares its step's).
    pub seq: u32,
    /// Its outline path (a cell's: `PATH#INDEX`).
    pub path: String,
    /// Nesting depth.
    pub depth: u32,
    /// Display name (a cell's: `step [var=value]`).
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// What would happen.
    pub verdict: Planned,
}

/// The plan as text, one line per step.
pub fn render(job: &str, lines: &[Line]) -> String {
    let mut out = format!("job {job}\n");
    for l in lines {
        out.push_str(&format!(
            "  {}{} [{}] {}\n",
            "  ".repeat(l.depth as usize),
            l.name,
            l.kind,
            words(&l.verdict)
        ));
    }
    out
}

fn words(p: &Planned) -> String {
    match p {
        Planned::Cached(run) => format!("cached (from run {run})"),
        Planned::Run(why) => format!("would run: {}", why.join("; ")),
        Planned::Skipped(why) => format!("skipped: {why}"),
        Planned::Container => String::new(),
        Planned::Depends(cases) => cases
            .iter()
            .map(|c| {
                let when = condition(&c.when);
                let then = match &*c.then {
                    Planned::Cached(run) => format!("cached (from run {run})"),
                    // A case with no condition is what happens otherwise: say why.
                    Planned::Run(why) if when.is_none() && !why.is_empty() => {
                        format!("otherwise would run: {}", why.join(", "))
                    }
                    Planned::Run(_) => "runs".to_owned(),
                    Planned::Skipped(_) => "skipped".to_owned(),
                    other => format!("({})", words(other)),
                };
                match when {
                    Some(when) => format!("{then} if {when}"),
                    None => then,
                }
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `a and b, or c`; `None` when nothing is required.
fn condition(when: &[Vec<Cond>]) -> Option<String> {
    let alternatives: Vec<String> = when
        .iter()
        .filter(|all| !all.is_empty())
        .map(|all| all_of(all))
        .collect();
    (!alternatives.is_empty()).then(|| alternatives.join(", or "))
}

/// Conditions that must all hold; the ends of one step in a row are said once
/// (`` `check` fails, fails, then succeeds ``).
fn all_of(all: &[Cond]) -> String {
    let mut parts: Vec<(Option<&str>, Vec<String>)> = Vec::new();
    for c in all {
        let (step, what) = match c {
            Cond::Says { step, verdict } => (Some(step.as_str()), format!("says {verdict}")),
            Cond::Fails { step } => (Some(step.as_str()), "fails".to_owned()),
            Cond::Succeeds { step } => (Some(step.as_str()), "succeeds".to_owned()),
            other => (None, other.to_string()),
        };
        match parts.last_mut() {
            Some((Some(last), ends)) if step == Some(*last) => ends.push(what),
            _ => parts.push((step, vec![what])),
        }
    }
    parts
        .into_iter()
        .map(|(step, mut ends)| {
            let last = ends.pop().unwrap_or_default();
            let ends = match ends.is_empty() {
                true => last,
                false => format!("{}, then {last}", ends.join(", ")),
            };
            match step {
                Some(s) => format!("`{s}` {ends}"),
                None => ends,
            }
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The plan of one job as JSON (`treadle plan --json`, one object per job).
pub fn to_json(job: &str, lines: &[Line]) -> Value {
    let steps: Vec<Value> = lines
        .iter()
        .map(|l| {
            let mut v = planned_json(&l.verdict);
            v["seq"] = json!(l.seq);
            v["path"] = json!(l.path);
            v["depth"] = json!(l.depth);
            v["name"] = json!(l.name);
            v["kind"] = json!(l.kind);
            v
        })
        .collect();
    json!({ "job": job, "steps": steps })
}

fn planned_json(p: &Planned) -> Value {
    match p {
        Planned::Cached(run) => json!({ "plan": "cached", "from_run": run }),
        Planned::Run(why) => json!({ "plan": "run", "reasons": why }),
        Planned::Skipped(why) => json!({ "plan": "skipped", "reasons": [why] }),
        Planned::Container => json!({ "plan": "container" }),
        Planned::Depends(cases) => {
            let cases: Vec<Value> = cases
                .iter()
                .map(|c| {
                    let when: Vec<Vec<Value>> = c
                        .when
                        .iter()
                        .map(|all| all.iter().map(cond_json).collect())
                        .collect();
                    json!({ "when": when, "then": planned_json(&c.then) })
                })
                .collect();
            json!({ "plan": "depends", "cases": cases })
        }
    }
}

fn cond_json(c: &Cond) -> Value {
    match c {
        Cond::Says { step, verdict } => json!({ "step": step, "says": verdict }),
        Cond::Fails { step } => json!({ "step": step, "fails": true }),
        Cond::Succeeds { step } => json!({ "step": step, "succeeds": true }),
        other => json!({ "text": other.to_string() }),
    }
}
