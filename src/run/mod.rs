//! The executor: runs one job of a loaded pipeline, records it in the state file and
//! prints its transcript.
//!
//! * `exec/`: the walker. `exec/mod.rs` defines the run's context (`Ctx`: what a run
//!   shares, immutable, plus the run's owner of its mutable state) and the walker of one step
//!   (guard, attempts, timeouts, outcome steps, containers), the context's only methods. Each
//!   step kind is a child module of functions taking the context as an argument:
//!   * `job.rs`: the job's walk, its outcome steps and asserts; `walk.rs`: the plan in order,
//!     following routes (`max_visits`, the job's timeout);
//!   * `blame.rs`: a failed job's error naming the step that failed it, and how to run
//!     again an agent step the cache brought back before it;
//!   * `every.rs`: `version: every`, the plan run once per input set;
//!   * `outcome_steps.rs`: `on_success`, `on_failure`, `on_error`, `on_abort`, `ensure`
//!     (Concourse's step hooks) and which one runs;
//!   * `fix.rs`: `fix:`, a failed task handed to an agent before its command runs again;
//!   * `flow.rs`: `when:` guards, `race:`, `across:`;
//!   * `record.rs`: a step's record changed and written, how it ended shown, and the
//!     execution log in declaration order;
//!   * `ensemble.rs`: `ensemble:`, its members at once, the decision among their votes;
//!   * `approval_step.rs`: an `approval:` step, parked until it is answered;
//!   * `input.rs`: `input:` steps and an agent step's `ask_human` answerer;
//!   * `leaf.rs`: task and agent steps; `step_dir.rs`: a leaf's directory prepared and
//!     concluded (asserts, outputs); `agent_from_run.rs`: the job's budgets, the session
//!     it goes on in, and where its questions go;
//!   * `cached.rs`: the cache around a leaf step: its key, a hit shown and recorded
//!     instead of running it, its outputs stored after; `stored.rs`: a succeeded step's
//!     outcome on its way into the commit of its end;
//!   * `resource.rs`: `get` and `put` steps, and an agent's work on a git input;
//!     `resource_scripted.rs`: those of `resource_types:` and `time` resources;
//!     `version.rs`: which version a `get` fetches;
//!   * `forked.rs`: the agent step a forked run (`--fork RUN --at STEP[/TURN]`) forks;
//!   * `continued.rs`: what a resumed run continues of the run it resumes: an agent step
//!     left mid-way goes on in its session and directory, a task left mid-way starts
//!     again;
//! * `done.rs`: how a step or a job ended (`Status`, `Done`);
//! * `failure.rs`: why a step failed, typed (`StepFailure`, `FailureKind`), as the
//!   record, the transcript, the API and the wire carry it;
//! * `upstream.rs`: `context: { from }`, the decisions of earlier steps handed to a step;
//! * `handing.rs`: what an agent step is handed before its first turn (decisions,
//!   `context_paths:` files, a `prompt_file:` from an artifact), read when it runs;
//! * `cell.rs`: one cell of an `across:` step (its typed coordinate, name and values) and
//!   what a block gives the step it runs (`Given`: the per-step arguments);
//! * `run_state.rs`: the run's mutable state and its single owner (one lock, never held
//!   across an `.await`, and the budget counters);
//! * `admit.rs`: which `across:` cells start, under the block's token ceiling and the
//!   reservations of its running cells;
//! * `approval/`: the approval mailbox, and questions (`approval/question.rs`), parked
//!   until `treadle answer` gives a value that fits; `approval_record.rs`: what the state
//!   file records of an approval;
//! * `lifecycle.rs`: one run from its begin to its end ([`lifecycle::Run`]: begin, adopt,
//!   execute a whole job or one step, end), for YAML runs, workflows and workers alike; the
//!   only place the walker's context is built; `mode.rs`: how a run started (fresh,
//!   resumed, replayed, forced, rerun), the run's own;
//! * `one_leaf.rs`: one task or agent step run alone, for a worker (`treadle worker`);
//! * `open_run.rs`: a run begun without its plan, whose typed steps are handed to the
//!   walker one at a time (a Rust workflow, `crate::workflow`);
//! * `work.rs`: what such a step does (a command or an agent), taken from the typed step;
//! * `agents.rs`: the agent runner (real sessions, optionally through a model tape);
//! * `task.rs`: running a command in its process group; `caches.rs`: a task's `caches:`
//!   made ready;
//! * `output_limit.rs`: the most output one task step may print;
//! * `artifacts.rs`: step directories and artifacts ([`artifacts::Artifacts`]);
//! * `start.rs`: opening the step cache for a run, fresh, resumed or replayed;
//! * `step_sessions.rs`: the session each agent step is on, kept for a resume;
//! * `state.rs`: the redb state file;
//! * `state_records.rs`: what it records of a run and its steps, and their statuses;
//! * `spent.rs`: what agent steps spent (tokens, cost, replayed from the cache), read
//!   from their usage records, and two records added;
//! * `state_view.rs`: a state file opened to read only (`treadle runs` on a read-only
//!   `.treadle`);
//! * `state_lock.rs`: one process per state file, and who holds it;
//! * `event.rs`: what happens in a run, one `Event` each (printed, logged, sent);
//! * `event_log.rs`: the run's event log (numbered events in the state file) and its live
//!   followers;
//! * `transcript.rs`: what is printed; `error_lines.rs`: a failed run's error there, one
//!   clause a line; `redactor.rs`: secrets masked in all of it;
//! * `terminal.rs`: control characters in printed text shown, not sent;
//! * `waiting.rs`: what a running run waits on (a person's approval or answer, its
//!   deadline), as `treadle runs`, the API and the page show it;
//! * `ports.rs`: the interfaces to the agent step and to asserts, and where an agent
//!   step's questions go.

mod admit;
pub mod agents;
pub mod approval;
mod approval_record;
pub mod artifacts;
mod caches;
pub(crate) mod cell;
mod done;
pub mod error_lines;
pub mod event;
pub mod event_log;
pub mod exec;
pub mod failure;
mod handing;
pub(crate) mod lifecycle;
pub(crate) mod mode;
pub mod one_leaf;
pub mod open_run;
pub(crate) mod output_limit;
pub mod ports;
mod redactor;
mod run_state;
pub mod spent;
pub mod start;
pub mod state;
pub mod state_lock;
pub mod state_records;
pub mod state_view;
pub mod step_sessions;
pub mod task;
pub mod terminal;
pub mod transcript;
mod upstream;
pub mod waiting;
mod work;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use exec::Status;
pub use failure::{FailureKind, StepFailure};
pub use ports::{AgentRunner, AgentStepError, AgentStepRequest, StepReporter};
pub use state::{RunStatus, StateError, StepStatus, Store};
pub use transcript::{Event, Redactor, Style, Transcript};

use crate::pipeline::{Diagnostic, Loaded};

/// The state file of the pipeline `file`: `given` (`--state`) when there is one, else
/// `.treadle/state.redb` beside the file.
pub fn state_path(file: &Path, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        crate::pipeline::dir_of(file)
            .join(".treadle")
            .join("state.redb")
    })
}

/// What to run and how.
pub struct RunOptions {
    /// The job (`None`: the only one).
    pub job: Option<String>,
    /// Transcript style.
    pub style: Style,
    /// The state file (`None`: beside the pipeline).
    pub state: Option<PathBuf>,
    /// Cancelled on Ctrl-C.
    pub cancel: CancellationToken,
    /// The version each `get` of a resource fetches, by resource (the inputs `treadle
    /// watch` decided for a build); a resource not here is fetched at its latest.
    pub versions: std::collections::BTreeMap<String, String>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The job cannot be chosen.
    #[error("{0}")]
    Job(Diagnostic),
    /// The state file cannot be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// The run directory cannot be made.
    #[error(transparent)]
    Artifacts(#[from] artifacts::ArtifactError),
    /// A resume or replay cannot start (no such run or step).
    #[error(transparent)]
    Start(#[from] crate::cache::StartError),
    /// Processes of the run being resumed are still alive.
    #[error(transparent)]
    Leftovers(#[from] crate::keeper::LeftoverError),
    /// The run ended but the state file could not record it (a full disk).
    #[error(
        "run {run} {status}, but the state file could not record it ({source}){}",
        if *.noted {
            format!(
                "; it is recorded as {status} the next time treadle opens the state file (`treadle runs`, `serve`, `watch`), once the disk has room"
            )
        } else {
            "; nor could its lock file keep it, so `treadle runs` will show it as interrupted".to_owned()
        }
    )]
    EndNotRecorded {
        /// The run.
        run: u64,
        /// How it ended (`errored`, ...).
        status: &'static str,
        /// Why the state file did not take it.
        source: StateError,
        /// Whether its end was kept in the lock file, to be recorded at the next open.
        noted: bool,
    },
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Run id in the state file.
    pub run: u64,
    /// How it ended.
    pub status: Status,
    /// Why, when not well.
    pub error: Option<String>,
    /// The kind of that failure.
    pub failure: Option<FailureKind>,
}

impl RunReport {
    /// The process exit code: 0, 1 (a step failed), 2 (could not run), 130 (interrupted).
    pub fn exit_code(&self) -> u8 {
        self.status.exit_code()
    }
}

/// The masker of everything a run of `loaded` prints or keeps: it hides the values of
/// every secret variable of the file (`crate::pipeline::secrets`), whichever job runs.
pub fn redactor(loaded: &Loaded) -> Redactor {
    Redactor::new(crate::pipeline::secrets::values(&loaded.pipeline))
}

/// Opens the state file (with the session journal in it) off the async threads.
pub async fn open_store(path: PathBuf) -> Result<Arc<Store>, StateError> {
    tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(StateError::from)?
        .map(Arc::new)
}

/// Runs one job.
pub async fn run(
    loaded: &Loaded,
    options: RunOptions,
    agents: Arc<dyn AgentRunner>,
) -> Result<RunReport, RunError> {
    loaded.job(options.job.as_deref()).map_err(RunError::Job)?;
    let state_path = state_path(&loaded.file, options.state.clone());
    let store = open_store(state_path).await?;
    run_in(loaded, options, store, agents).await
}

/// Runs one job, recording it in an open state file (`treadle test` runs every job of
/// a file in one; `options.state` is not used).
pub async fn run_in(
    loaded: &Loaded,
    options: RunOptions,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
) -> Result<RunReport, RunError> {
    let fresh = crate::cache::Start::Fresh;
    run_from(loaded, options, store, agents, &fresh).await
}

/// Runs one job fresh, or resuming or replaying an earlier run (`--resume`, `--replay`).
pub async fn run_from(
    loaded: &Loaded,
    options: RunOptions,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    start: &crate::cache::Start,
) -> Result<RunReport, RunError> {
    run_served(loaded, options, store, agents, start, None).await
}

/// What a run started by `treadle serve` needs besides an ordinary one.
pub(crate) struct Served {
    /// Called with the run's id and journal once it has them, before its first event.
    pub on_begin: Box<dyn FnOnce(u64, Arc<event_log::EventLog>) + Send>,
    /// Runs its task and agent steps on workers over NATS (`treadle serve --nats`).
    pub remote: Option<Arc<dyn exec::RemoteSteps>>,
}

/// Runs one job like [`run_from`]; `served`: it runs in `treadle serve`, which follows it
/// live and answers its approvals.
pub(crate) async fn run_served(
    loaded: &Loaded,
    options: RunOptions,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    start: &crate::cache::Start,
    served: Option<Served>,
) -> Result<RunReport, RunError> {
    let earlier = start::earlier_job(&store, start).await?;
    let job = loaded
        .job(options.job.as_deref().or(earlier.as_deref()))
        .map_err(RunError::Job)?;
    let opening = opening(loaded, job, options, store, agents, served);
    let (run, _) = lifecycle::Run::begin(opening, start).await?;
    let done = run.execute(loaded, job).await;
    run.end(done).await
}

/// Goes on with run `id`, which a process that stopped left running (`treadle serve` and
/// `treadle watch` at start-up, holding the state file's lock, so that process is gone):
/// the same id, its transcript continuing, its finished steps kept as they are, a step it
/// left unfinished continued (an agent step in its session, a task from its start).
pub(crate) async fn adopt_served(
    loaded: &Loaded,
    options: RunOptions,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    id: u64,
    served: Option<Served>,
) -> Result<RunReport, RunError> {
    let earlier = start::earlier_job(&store, &crate::cache::Start::Resume(id)).await?;
    let job = loaded.job(earlier.as_deref()).map_err(RunError::Job)?;
    let opening = opening(loaded, job, options, store, agents, served);
    let (run, _) = lifecycle::Run::adopt(opening, id).await?;
    let done = run.execute(loaded, job).await;
    run.end(done).await
}

/// What a YAML run of `job` is begun with.
fn opening<'a>(
    loaded: &'a Loaded,
    job: &'a crate::pipeline::Job,
    options: RunOptions,
    store: Arc<Store>,
    agents: Arc<dyn AgentRunner>,
    served: Option<Served>,
) -> lifecycle::Opening<'a> {
    lifecycle::Opening {
        loaded,
        job,
        store,
        agents,
        style: options.style,
        cancel: options.cancel,
        versions: options.versions,
        served,
    }
}

/// How long the processes of a run being resumed may take to die once killed.
const LEFTOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Makes sure no command of run `run` of `store` is still alive (its treadle was killed,
/// and its keepers may not have swept yet, or were killed too) before a resume of it runs
/// any step again: kills what is left and waits for it to be gone.
pub async fn stop_leftovers_of(store: &Store, run: u64) -> Result<usize, RunError> {
    let mark = crate::keeper::mark(store.path(), run);
    let stopped =
        tokio::task::spawn_blocking(move || crate::keeper::stop_leftovers(&mark, LEFTOVER_WAIT))
            .await
            .map_err(StateError::from)??;
    if stopped > 0 {
        crate::console::tell!("treadle: stopped {stopped} process(es) left running by run {run}");
    }
    Ok(stopped)
}

/// Every step of the outline, pending, as the run's first record of it.
pub(crate) fn pending_records(
    outline: &crate::pipeline::outline::Outline,
) -> Vec<state::StepRecord> {
    outline
        .entries
        .iter()
        .map(|e| {
            state::StepRecord::pending(e.seq, e.path.clone(), e.name.clone(), e.kind.to_string())
        })
        .collect()
}
