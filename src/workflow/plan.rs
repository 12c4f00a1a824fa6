//! A plan of a workflow ([`plan()`]): the workflow is called with a flow whose steps do not
//! run. Each step it calls is appended to the workflow's job, as in a run, and judged by
//! the planner `treadle plan` uses for YAML (`crate::cache::plan::plan`, whose keys come
//! from the function the run's cache calls), so the plan says "cached" exactly when a run
//! would replay the step.
//!
//! What the step gives back to the workflow:
//! * a step the cache would replay: its recorded result (its text, verdict, typed answer),
//!   so the workflow goes on as the run would;
//! * a step that would run: an empty result (exit code 0, no text). A verdict or a typed
//!   answer cannot be made up, so [`super::Flow::agent`] with verdicts and
//!   [`super::Flow::agent_typed`] give [`FlowError::Unevaluable`] instead, and the plan
//!   ends there, saying which step's output what follows depends on. A workflow can ask
//!   [`super::Flow::is_planning`] and [`super::Flow::known`] and say the same of any
//!   other output with [`super::Flow::unevaluable`].

use std::path::PathBuf;

use serde_json::json;

use super::flow::{Flow, FlowError, Mode, Options, Workflow, loaded_of};
use crate::cache::cas::{Cas, CasError};
use crate::cache::plan::{Line, Planned, render, to_json};
use crate::cache::records::{Records, SuccessRecord};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded, controls::OUTPUT_FILE};
use crate::run::state::StepRecord;
use crate::run::{RunError, StateError, StepStatus};

/// What a run of a workflow would do, step by step, as far as it can be known before.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The workflow's name (its job's).
    pub job: String,
    /// One line per step it called, in order, with what a run would do with it.
    pub steps: Vec<Line>,
    /// Where the plan stopped: what followed depends on an output known only once its
    /// step runs (`None`: the workflow went to its end).
    pub unevaluable: Option<Unevaluable>,
    /// The workflow's own error, when it gave up on the results the plan gave it.
    pub error: Option<String>,
}

/// A branch of the workflow the plan cannot follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unevaluable {
    /// The step whose output it hangs on.
    pub step: String,
    /// Which output (`the verdict`, `the typed answer`, ...).
    pub what: String,
}

impl Plan {
    /// The plan as `treadle plan` prints one: a line per step, then where it stopped.
    pub fn render(&self) -> String {
        let mut out = render(&self.job, &self.steps);
        if let Some(u) = &self.unevaluable {
            out.push_str(&format!(
                "  ... unevaluable: what follows depends on {} of `{}`, known only once it runs\n",
                u.what, u.step
            ));
        }
        if let Some(e) = &self.error {
            out.push_str(&format!("  ... the workflow gave up: {e}\n"));
        }
        out
    }

    /// The plan as JSON (`treadle plan --json`'s shape, with `unevaluable`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = to_json(&self.job, &self.steps);
        v["unevaluable"] = match &self.unevaluable {
            Some(u) => json!({ "step": u.step, "what": u.what }),
            None => serde_json::Value::Null,
        };
        v["error"] = json!(self.error);
        v
    }

    /// The line of step `name`, if the workflow called it.
    pub fn step(&self, name: &str) -> Option<&Line> {
        self.steps.iter().find(|l| l.name == name)
    }
}

/// Plans `workflow` on `input` against the cache of the state file in `options` (read
/// only when it exists; `options.resume` is not used: a plan is of a fresh run).
pub async fn plan<W: Workflow>(
    workflow: &W,
    input: W::Input,
    options: Options,
) -> Result<Plan, FlowError> {
    let Options { state, agents, .. } = options;
    let loaded = loaded_of::<W>(agents);
    let store = match state.exists() {
        true => Some(
            crate::run::open_store(state.clone())
                .await
                .map_err(RunError::from)?,
        ),
        false => None,
    };
    let records = match &store {
        Some(s) => Some(
            Records::open(s.database())
                .map_err(|e| RunError::from(StateError::Db(e.to_string())))?,
        ),
        None => None,
    };
    let planner = Planner {
        records,
        cas: Cas::new(state_dir(&state).join("cas")),
        lines: Vec::new(),
        last: None,
    };
    let mut flow = Flow::planning(loaded, Box::new(planner));
    let output = workflow.run(&mut flow, input).await;
    let Mode::Plan(planner) = flow.into_mode() else {
        return Err(FlowError::Failed("a plan's flow became a run".to_owned()));
    };
    let (unevaluable, error) = match output {
        Ok(_) => (None, None),
        Err(FlowError::Unevaluable { step, what }) => (Some(Unevaluable { step, what }), None),
        Err(e) => (None, Some(e.to_string())),
    };
    drop(store);
    Ok(Plan {
        job: W::NAME.to_owned(),
        steps: planner.lines,
        unevaluable,
        error,
    })
}

fn state_dir(state: &std::path::Path) -> PathBuf {
    state
        .parent()
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}

/// Why a replayed step's typed answer cannot be read in a plan.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Its record has no output of the answer's name.
    #[error("its recorded outputs hold no `{0}`")]
    Missing(String),
    /// The cache cannot give it back.
    #[error("cannot restore it from the cache: {0}")]
    Cas(#[from] CasError),
    /// It cannot be read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
}

/// The planner behind a planning [`Flow`]: the lines so far, and the record of the last
/// step when the cache would replay it.
pub(crate) struct Planner {
    records: Option<Records>,
    cas: Cas,
    lines: Vec<Line>,
    last: Option<SuccessRecord>,
}

impl Planner {
    /// Plans the last step of `job` (just appended): its lines, and the record the flow
    /// gives back (its recorded result when it would be replayed, else an empty one).
    pub(super) fn step(&mut self, loaded: &Loaded, job: &Job) -> StepRecord {
        let outline = Outline::of(job);
        let entry = job.plan.last().and_then(|s| outline.entry(s)).cloned();
        let lines = crate::cache::plan::plan(loaded, job, self.records.as_ref());
        let Some(entry) = entry else {
            self.last = None;
            return StepRecord::pending(0, String::new(), String::new(), String::new());
        };
        self.lines
            .extend(lines.iter().filter(|l| l.seq >= entry.seq).cloned());
        let planned = lines
            .iter()
            .find(|l| l.seq == entry.seq)
            .map(|l| &l.verdict);
        self.last = match (planned, &self.records) {
            (Some(Planned::Cached(run)), Some(records)) => records
                .result(*run, entry.seq)
                .ok()
                .flatten()
                .filter(|r| r.run == *run && r.seq == entry.seq),
            _ => None,
        };
        let mut record =
            StepRecord::pending(entry.seq, entry.path, entry.name, entry.kind.to_string());
        record.exit_code = Some(0);
        if let Some(r) = &self.last {
            record.status = StepStatus::Succeeded;
            record.cached_from = Some(r.run);
            record.exit_code = r.exit_code;
            record.stdout_tail = r.stdout_tail.clone();
            record.verdict = r.verdict.clone();
            record.note = r.note.clone();
        }
        record
    }

    /// Whether the last step's result is known (it would be replayed).
    pub(super) fn known(&self) -> bool {
        self.last.is_some()
    }

    /// The typed answer (output `name`'s `output.json`) of the last step, when it would be
    /// replayed; `None`: not known.
    pub(super) fn typed_answer(&self, name: &str) -> Option<Result<String, AnswerError>> {
        let last = self.last.as_ref()?;
        Some(self.read_answer(last, name))
    }

    fn read_answer(&self, last: &SuccessRecord, name: &str) -> Result<String, AnswerError> {
        let tree = last
            .outputs
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| AnswerError::Missing(name.to_owned()))?;
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("answer");
        self.cas.restore(&tree.manifest, &dest)?;
        Ok(std::fs::read_to_string(dest.join(OUTPUT_FILE))?)
    }
}
