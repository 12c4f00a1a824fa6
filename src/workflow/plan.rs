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
//!   answer cannot be made up, and neither can an HTTP response, so [`super::Flow::agent`]
//!   with verdicts or a typed answer and [`super::Flow::http`] give
//!   [`FlowError::Unevaluable`] instead, and the plan
//!   ends there, saying which step's output what follows depends on. A workflow can ask
//!   [`super::Flow::is_planning`] and [`super::Flow::known`] and say the same of any
//!   other output with [`super::Flow::unevaluable`].

use std::path::PathBuf;

use serde_json::json;

use super::flow::{Flow, FlowError, Mode, Options, Workflow, loaded_of};
use super::planner::Planner;
use crate::cache::cas::Cas;
use crate::cache::plan::{Line, render, to_json};
use crate::cache::records::Records;
use crate::run::{RunError, StateError};

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
                .map_err(|e| RunError::from(StateError::Tables(Box::new(e))))?,
        ),
        None => None,
    };
    let planner = Planner::new(records, Cas::new(state_dir(&state).join("cas")));
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
        steps: planner.into_lines(),
        unevaluable,
        error,
    })
}

fn state_dir(state: &std::path::Path) -> PathBuf {
    state
        .parent()
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}
