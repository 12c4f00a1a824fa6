//! One task or agent step run alone, outside the walk of its job: what a worker
//! (`treadle worker`) does with a step the server sent it. The step runs in the server's
//! run as the worker hosts it (`lifecycle::Run::hosted`: no record or cache of its own),
//! through the context every run builds (`Run::ctx`) and the same leaf-running function
//! (`Ctx::leaf`), so a step runs on a worker exactly as it runs in `treadle run`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::artifacts::Artifacts;
use super::cell::Given;
use super::exec::Done;
use super::lifecycle::{Hosted, Run, Seat};
use super::ports::AgentRunner;
use super::state::{StepRecord, Store};
use super::transcript::Transcript;
use super::work::Work;
use crate::pipeline::outline::Outline;
use crate::pipeline::vars::Vars;
use crate::pipeline::{At, Job, Loaded, Step};

/// Which step to run, and with what.
pub struct OneLeaf<'a> {
    /// The pipeline, loaded from the text the server sent.
    pub loaded: &'a Loaded,
    /// The step's job.
    pub job: &'a Job,
    /// The step's outline seq.
    pub seq: u32,
    /// Which attempt this is.
    pub attempt: u32,
    /// The run's id on the server.
    pub run: u64,
    /// This process's state file (an agent step's session journal lives in it).
    pub store: Arc<Store>,
    /// Where the step's events go.
    pub transcript: Arc<Transcript>,
    /// The step's artifacts (its inputs already in place).
    pub artifacts: Arc<Artifacts>,
    /// Runs agent steps.
    pub agents: Arc<dyn AgentRunner>,
    /// The vars `load_var:` steps captured so far in the run.
    pub vars: Vars,
    /// Tokens the run's agent steps spent so far (against the job's budget).
    pub tokens_spent: u64,
    /// Millionths of a dollar the run's agent steps spent so far (the job's dollar budget).
    pub micro_usd_spent: u64,
    /// Cancelled when the server says so.
    pub cancel: CancellationToken,
    /// Admits the writes of an agent step's session: the worker's lease on the step.
    pub fence: Option<Arc<dyn treadle_session::WriteFence>>,
    /// The session an agent step restores (the step was taken over); `None`: a fresh one.
    pub resume: Option<treadle_session::event::SessionId>,
    /// Where an agent step's questions for a person go (the server whose run it is).
    pub questions: Option<Questions>,
    /// The `across:` cell this run of the step is.
    pub cell: Option<CellValues>,
}

pub use super::ports::Questions;

pub use super::cell::CellValues;

/// How the step went.
#[derive(Debug)]
pub struct LeafOutcome {
    /// How it ended.
    pub done: Done,
    /// Its record as the step left it (exit code, output tail, verdict, usage).
    pub record: Option<StepRecord>,
    /// Tokens it spent.
    pub tokens: u64,
    /// Millionths of a dollar it spent.
    pub micro_usd: u64,
    /// The step's declared outputs (collected into the artifacts when it succeeded).
    pub outputs: Vec<String>,
}

/// Why the step cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum OneLeafError {
    /// The pipeline the server sent has no such step (it changed between the two).
    #[error("job `{job}` has no step {seq}")]
    NoStep {
        /// The job.
        job: String,
        /// The seq asked for.
        seq: u32,
    },
    /// The cell's outputs cannot be collected here.
    #[error("cannot collect the cell's outputs: {0}")]
    Collect(#[from] super::artifacts::ArtifactError),
    /// The step asked for is neither a task nor an agent (only those go to workers).
    #[error("step {seq} of job `{job}` is not a task or an agent")]
    NotWork {
        /// The job.
        job: String,
        /// The seq asked for.
        seq: u32,
    },
}

/// The step of `job` whose outline seq is `seq`.
fn find<'j>(job: &'j Job, outline: &Outline, seq: u32) -> Option<&'j At<Step>> {
    let mut stack: Vec<&'j At<Step>> = job.plan.iter().collect();
    stack.extend(job.hooks().map(|(_, h)| h));
    while let Some(s) = stack.pop() {
        if outline.entry(s).is_some_and(|e| e.seq == seq) {
            return Some(s);
        }
        stack.extend(s.children());
        stack.extend(s.hooks().map(|(_, h)| h));
    }
    None
}

/// Runs the step.
pub async fn run_one(req: OneLeaf<'_>) -> Result<LeafOutcome, OneLeafError> {
    let outline = Outline::of(req.job);
    let no_step = || OneLeafError::NoStep {
        job: req.job.name.value.clone(),
        seq: req.seq,
    };
    let step = find(req.job, &outline, req.seq).ok_or_else(no_step)?;
    let work = Work::of(step).ok_or_else(|| OneLeafError::NotWork {
        job: req.job.name.value.clone(),
        seq: req.seq,
    })?;
    let entry = outline
        .entries
        .get(req.seq as usize)
        .cloned()
        .ok_or_else(no_step)?;
    let cell = req.cell.clone().map(super::cell::Cell::from_values);
    let entry = match &cell {
        Some(c) => c.entry(&entry),
        None => entry,
    };
    // A cell collects its outputs into its place under its block's artifact
    // (`ARTIFACT/value/value`), as in the walk; the server moves that place into its own.
    if cell.is_some() && !step.outputs.is_empty() {
        let names: Vec<String> = step.outputs.iter().map(|o| o.value.clone()).collect();
        req.artifacts.begin_collection(&names)?;
    }
    let run = Run::hosted(
        Hosted {
            run: req.run,
            store: req.store,
            transcript: req.transcript,
            artifacts: req.artifacts,
            agents: req.agents,
            cancel: req.cancel.clone(),
            vars: req.vars,
            spent: (req.tokens_spent, req.micro_usd_spent),
            seat: Seat {
                fence: req.fence.clone(),
                resume: req.resume,
                questions: req.questions.clone(),
                ..Seat::default()
            },
        },
        req.job,
    );
    let ctx = run.ctx(req.loaded, req.job);
    let done = ctx
        .leaf(
            step,
            work,
            &entry,
            req.attempt,
            req.cancel.clone(),
            Given {
                cell: cell.as_ref(),
                handed: None,
            },
        )
        .await;
    let record = ctx.state.with(|s| match super::cell::CellAt::of(&entry) {
        Some(at) => s.cell_records.get(&at).cloned(),
        None => s.records.get(req.seq as usize).cloned(),
    });
    let tokens = ctx.state.tokens().saturating_sub(req.tokens_spent);
    let micro_usd = ctx.state.micro_usd().saturating_sub(req.micro_usd_spent);
    Ok(LeafOutcome {
        done,
        record,
        tokens,
        micro_usd,
        outputs: step.outputs.iter().map(|o| o.value.clone()).collect(),
    })
}
