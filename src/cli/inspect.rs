//! The commands that do not run anything: `validate`, `plan`, `schema`, `runs` (and
//! `runs --show RUN`, a past run's transcript rendered again from its event journal).

use crate::console::say;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::EXIT_CONFIG;
use crate::pipeline;
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::Outline;
use crate::run::state::{RunRecord, StateError, StepRecord, Store};
use crate::run::state_lock::LockError;
use crate::run::state_view::StateView;
use crate::run::waiting::Waiting;

pub(super) fn validate(file: &Path) -> u8 {
    match super::load_or_exit(file, None, true) {
        Ok(loaded) => {
            let jobs = loaded.pipeline.jobs.len();
            let steps: usize = loaded
                .pipeline
                .jobs
                .iter()
                .map(|j| Outline::of(j).entries.len())
                .sum();
            say!("{}: ok ({jobs} job(s), {steps} step(s))", file.display());
            let warnings = pipeline::check_container::warnings(&loaded.pipeline)
                .into_iter()
                .chain(pipeline::check_agent::warnings(&loaded.pipeline));
            for (pos, why) in warnings {
                crate::console::tell!("{}:{pos}: warning: {why}", file.display());
            }
            0
        }
        Err(code) => code,
    }
}

pub(super) fn schema() -> u8 {
    match serde_json::to_string_pretty(&pipeline::schema()) {
        Ok(s) => {
            say!("{s}");
            0
        }
        Err(e) => {
            crate::console::tell!("cannot render the schema: {e}");
            EXIT_CONFIG
        }
    }
}

/// The state file of `file`'s runs, or (said on stderr) that none is recorded yet.
pub(super) fn recorded(file: &Path, state: Option<PathBuf>) -> Result<PathBuf, u8> {
    let path = crate::run::state_path(file, state);
    if path.exists() {
        return Ok(path);
    }
    crate::console::tell!(
        "{}: no runs recorded yet (no {})\nhint: run it with `treadle run {}`",
        file.display(),
        path.display(),
        file.display()
    );
    Err(EXIT_CONFIG)
}

/// Whether a run of the pipeline file `recorded` (as the run recorded it) is one of
/// `only`'s (every run is, without `only`). The state file is the directory's, so a name
/// names one file: runs recorded as `review.yml` and `./review.yml` are the same file's.
pub(super) fn is_of(only: Option<&Path>, recorded: &str) -> bool {
    only.is_none_or(|file| Path::new(recorded).file_name() == file.file_name())
}

pub(super) fn runs(
    file: &Path,
    steps: Option<u64>,
    state: Option<PathBuf>,
    only: Option<&Path>,
) -> u8 {
    let path = match recorded(file, state) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let shown = match Store::open(&path) {
        // This process holds the state file's lock: a run marked running has no process,
        // so it waits on nobody either.
        Ok(store) => show_runs(
            (steps, only),
            (&|_| true, &|_| None),
            &|id| crate::cache::records::forked_from(&store.database(), id),
            || store.runs(),
            |r| store.run(r),
            |r| store.steps(r),
        ),
        // A watcher holds it: what it last wrote beside it (`watch/runs.json`).
        Err(e @ StateError::Held(LockError::Held { .. })) => match from_watcher(&path, &e) {
            Some(snap) => show_runs(
                (steps, only),
                (&|_| false, &|_| None),
                &|_| None,
                || Ok(snap.runs.iter().map(|(r, _)| r.clone()).collect()),
                |id| snapshot_run(&snap, id).map(|(r, _)| r),
                |id| snapshot_run(&snap, id).map(|(_, s)| s),
            ),
            None => Err(e),
        },
        // Not writable (a read-only `.treadle`): read it without its lock. A file that
        // another process holds is not read this way (redb refuses), so that error stands.
        Err(e @ StateError::Busy(_)) => Err(e),
        Err(e) => match StateView::open(&path) {
            // Without the lock, whether a run marked running has a process is not known:
            // it is shown as recorded.
            Ok(view) => show_runs(
                (steps, only),
                (&|_| false, &|_| None),
                &|_| None,
                || view.runs(),
                |r| view.run(r),
                |r| view.steps(r),
            ),
            Err(_) => Err(e),
        },
    };
    match shown {
        Ok(()) => 0,
        Err(e) => {
            crate::console::tell!("{e}");
            EXIT_CONFIG
        }
    }
}

/// The runs the watcher holding the state file at `path` (`held` says so) last wrote beside
/// it, said to be that; `None` when no watcher wrote any (another kind of process holds it).
pub(super) fn from_watcher(
    path: &Path,
    held: &StateError,
) -> Option<crate::watch::control::RunsSnapshot> {
    let snap = crate::watch::control::read_runs(&crate::pipeline::dir_of(path)).ok()?;
    let age = crate::clock::now_ms().saturating_sub(snap.written_ms);
    crate::console::tell!(
        "treadle: {held}; its runs as the watcher wrote them {} ago:",
        format_duration(Duration::from_millis(age))
    );
    Some(snap)
}

/// Run `id` of a watcher's snapshot, with its steps.
pub(super) fn snapshot_run(
    snap: &crate::watch::control::RunsSnapshot,
    id: u64,
) -> Result<(RunRecord, Vec<StepRecord>), StateError> {
    snap.runs
        .iter()
        .find(|(r, _)| r.id == id)
        .cloned()
        .ok_or(StateError::NoRun(id))
}

/// `treadle runs --show RUN`: the run's journaled events, rendered as the live transcript
/// rendered them (or, with `json`, as the JSON lines `treadle run --json` printed). The
/// events were masked before they were journaled.
pub(super) fn show(file: &Path, run: u64, json: bool, state: Option<PathBuf>) -> u8 {
    let path = match recorded(file, state) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let events = Store::open(&path).and_then(|store| {
        store.run(run)?;
        crate::run::event_log::read_after(&store.database(), run, 0)
    });
    let events = match events {
        Ok(e) => e,
        Err(e) => {
            crate::console::tell!("{e}");
            return EXIT_CONFIG;
        }
    };
    let style = if json {
        crate::run::Style::Json
    } else {
        crate::run::Style::Plain
    };
    let transcript = crate::run::Transcript::new(style, crate::run::Redactor::default());
    for event in &events {
        transcript.replay(&event.json);
    }
    0
}

/// How a running run stands: whether its process is gone (`stopped`), and what it waits on.
pub(super) type Stood<'a> = (&'a dyn Fn(u64) -> bool, &'a dyn Fn(u64) -> Option<Waiting>);

/// Prints the runs, or one run's steps, read by the given functions.
fn show_runs(
    (steps, only): (Option<u64>, Option<&Path>),
    (stopped, waiting): Stood<'_>,
    forked: &dyn Fn(u64) -> Option<(u64, String)>,
    runs: impl FnOnce() -> Result<Vec<RunRecord>, StateError>,
    run: impl FnOnce(u64) -> Result<RunRecord, StateError>,
    steps_of: impl FnOnce(u64) -> Result<Vec<StepRecord>, StateError>,
) -> Result<(), StateError> {
    match steps {
        None => runs().map(|list| {
            let list: Vec<RunRecord> = list
                .into_iter()
                .filter(|r| is_of(only, &r.pipeline))
                .collect();
            print_runs(&list, (stopped, waiting), forked, only.is_none());
        }),
        Some(id) => run(id)
            .and_then(|_| steps_of(id))
            .map(|list| print_steps(&list)),
    }
}

fn ms(d: Option<u64>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format_duration(Duration::from_millis(d)),
    )
}

/// What the status column says of a run: a run marked running whose process is gone
/// (`stopped`) is "interrupted — resumable" (`treadle run --resume`, or a server started on
/// the state file adopts it).
fn shown_status(r: &RunRecord, stopped: &dyn Fn(u64) -> bool) -> &'static str {
    match r.status {
        crate::run::RunStatus::Running if stopped(r.id) => INTERRUPTED,
        other => other.as_str(),
    }
}

/// How `treadle runs` and the run page show a run a stopped process left running.
pub(crate) const INTERRUPTED: &str = "interrupted — resumable";

/// The runs table of `treadle runs` (also printed from a server's answer); `stopped`: a
/// running run's process is gone.
/// `forked`: the run and point a run was forked from, if it was (its last column says so).
/// `with_file`: a column says each run's pipeline file (the runs of several files).
pub(super) fn print_runs(
    runs: &[RunRecord],
    (stopped, waiting): Stood<'_>,
    forked: &dyn Fn(u64) -> Option<(u64, String)>,
    with_file: bool,
) {
    let now = crate::clock::now_ms();
    let file = |name: &str| match with_file {
        true => format!("{name:<20} "),
        false => String::new(),
    };
    say!(
        "{:>5}  {}{:<10} {:<16} {:>9}  error",
        "run",
        file("file"),
        "status",
        "job",
        "duration"
    );
    for r in runs {
        // A run parked on a person says so, with its deadline, rather than "running".
        let parked = waiting(r.id).filter(|_| r.status == crate::run::RunStatus::Running);
        let status = parked
            .as_ref()
            .map_or(shown_status(r, stopped), Waiting::status);
        let mut notes = notes(r, forked);
        if let Some(w) = &parked {
            notes = [w.detail(now), notes]
                .into_iter()
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
        }
        say!(
            "{:>5}  {}{:<10} {:<16} {:>9}  {}",
            r.id,
            file(&r.pipeline),
            status,
            r.job,
            ms(r.duration_ms),
            notes
        );
    }
}

/// The last column of a run's row: why it did not succeed, and where a fork comes from.
fn notes(r: &RunRecord, forked: &dyn Fn(u64) -> Option<(u64, String)>) -> String {
    let fork = forked(r.id).map(|(of, at)| format!("fork of run {of} at {at}"));
    [r.error.clone(), fork]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The last column of a step's row: why it did not succeed (or why it was skipped, when a
/// workflow's `skip(label, reason)` said), what it kept of its outputs (`keep_on_failure:`)
/// or started from, and the worker that took it (`treadle serve --nats`).
fn step_notes(s: &StepRecord) -> String {
    let skipped = s.status == crate::run::StepStatus::Skipped;
    let why = s
        .error
        .clone()
        .or_else(|| s.produced.note.clone().filter(|_| skipped));
    let kept = s.kept.as_ref().map(|k| {
        let outputs = k.outputs.join(", ");
        format!("kept: {outputs} in {}", k.dir)
    });
    let from_kept = s
        .from_kept
        .map(|run| format!("started from the outputs run {run} kept"));
    let worker = s.worker.as_ref().map(|w| format!("on {w}"));
    [why, kept, from_kept, worker]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The steps table of `treadle runs --steps N` (also printed from a server's answer).
pub(super) fn print_steps(list: &[StepRecord]) {
    say!(
        "{:<12} {:<24} {:<12} {:<10} {:>9} {:>5} {:>8}  error",
        "path",
        "step",
        "kind",
        "status",
        "duration",
        "exit",
        "attempts"
    );
    for s in list {
        let exit = s
            .produced
            .exit_code
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        say!(
            "{:<12} {:<24} {:<12} {:<10} {:>9} {:>5} {:>8}  {}",
            s.path,
            s.name,
            s.kind,
            s.status.as_str(),
            ms(s.duration_ms),
            exit,
            s.attempts,
            step_notes(s)
        );
    }
}
