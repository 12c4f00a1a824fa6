//! One typed step run within a run that is already open: the executor's entry for a front
//! end whose plan is not known in advance (a Rust workflow, `crate::workflow`). A thin
//! handle on the run's lifecycle (`super::lifecycle::Run`): the run is begun and ended as a
//! YAML run is, and each step, appended to the run's job, is given its outline seq and
//! chain link by the same functions YAML uses (`Outline::of`, `Chain::of`) and walked by
//! the same `Ctx::exec` under the same run state, deadline and picked sources, so it has
//! the same key, the same record in the state file and the same transcript as a YAML step.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::exec::Done;
use super::lifecycle::{Opening, Run};
use super::state::{StepRecord, Store};
use super::transcript::Style;
use super::{AgentRunner, RunError, RunReport};
use crate::cache::Start;
use crate::pipeline::{Job, Loaded};

/// A run begun in the state file, whose steps are handed to it one at a time.
pub struct OpenRun {
    run: Run,
    /// Its event journal (what `treadle serve` follows it by).
    journal: Arc<super::event_log::EventLog>,
}

impl OpenRun {
    /// Begins a run of `job` (its plan may be empty: steps come later) in `store`, fresh
    /// or resuming run `RUN` (`Start::Resume`); other starts need a plan known in advance.
    /// The job's `timeout:` counts from here.
    pub async fn begin(
        loaded: &Loaded,
        job: &Job,
        store: Arc<Store>,
        agents: Arc<dyn AgentRunner>,
        start: &Start,
        style: Style,
        cancel: CancellationToken,
    ) -> Result<Self, RunError> {
        let opening = Opening {
            loaded,
            job,
            store,
            agents,
            style,
            cancel,
            versions: Default::default(),
            served: None,
        };
        let (run, journal) = Run::begin(opening, start).await?;
        Ok(Self { run, journal })
    }

    /// Its event journal, which `treadle serve`'s followers subscribe to.
    pub fn journal(&self) -> Arc<super::event_log::EventLog> {
        self.journal.clone()
    }

    /// Its approvals and questions are answered over `treadle serve`'s API, as a served
    /// YAML run's are.
    pub fn answered_by_server(&mut self) {
        self.run.answered_by_server();
    }

    /// The run's id in the state file.
    pub fn id(&self) -> u64 {
        self.run.id()
    }

    /// The record of the step at outline `seq`, as it stands.
    pub fn record(&self, seq: u32) -> Option<StepRecord> {
        self.run
            .state()
            .with(|s| s.records.get(seq as usize).cloned())
    }

    /// Where artifact `name` is now (the last step that made it).
    pub fn artifact(&self, name: &str) -> Option<PathBuf> {
        self.run.artifacts().artifact(name)
    }

    /// Runs the last step of `job`'s plan (appended since the previous call), through the
    /// walker, with every step before it as the work it chains to. Returns its outcome and
    /// its outline seq.
    pub async fn step(&mut self, loaded: &Loaded, job: &Job) -> (Done, u32) {
        self.run.step(loaded, job).await
    }

    /// Ends the run with `done` (the front end's outcome), recorded and shown as a YAML
    /// run's end is.
    pub async fn end(self, done: Done) -> Result<RunReport, RunError> {
        self.run.end(done).await
    }
}
