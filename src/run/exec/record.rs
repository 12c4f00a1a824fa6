//! What the walker records as steps go: a step's record changed and written to the state
//! file (a cell's own view kept beside it), how a step or an attempt ended shown, and the
//! execution log `assert: execution` checks, in declaration order for steps that ran at
//! once.

use std::time::{Duration, Instant};

use crate::pipeline::outline::Entry;
use crate::pipeline::{Kind, Step, StepKind};
use crate::run::cell::CellAt;
use crate::run::exec::{Ctx, Done, Logged};
use crate::run::state::{StateError, StepRecord, StepStatus, Store, put_step_in};
use crate::run::transcript::Event;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Which entries of the execution log belong to a group whose order is put right.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Members {
    /// The steps nested in it (`in_parallel`, `race`, `ensemble`).
    Children,
    /// The cells of an `across:` step.
    Cells,
}

/// Changes a step's record and writes it (`update_at` for a leaf that may be a cell).
pub(crate) async fn update<'a>(ctx: &Ctx<'a>, seq: u32, change: impl FnOnce(&mut StepRecord)) {
    update_in(ctx, seq, None, change).await;
}

/// Writes to the state file off the async threads. A failure does not stop the step
/// (what it does matters more than its record), but the first one is kept and makes
/// the run exit 2 at its end.
pub(crate) async fn write_state<'a, E: std::fmt::Display>(
    ctx: &Ctx<'a>,
    write: impl FnOnce(&Store) -> Result<(), E> + Send + 'static,
) {
    let store = ctx.store.clone();
    let result = tokio::task::spawn_blocking(move || write(&store).map_err(|e| e.to_string()));
    let error = match result.await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(e) => e.to_string(),
    };
    keep_state_error(ctx, error);
}

/// Keeps the first failure to write the state file.
pub(crate) fn keep_state_error<'a>(ctx: &Ctx<'a>, error: String) {
    ctx.state.with(|s| {
        s.state_error.get_or_insert(error);
    });
}

/// Records that a step's attempt `attempt` starts: the record says it runs (its status
/// and start time changed before, in memory, by [`change()`]) and the transcript's
/// `step_started`, in one commit without a sync. Nothing relies on it across a crash: a
/// step whose end is not durable runs again whatever its record said; it is there for
/// whoever follows the run now.
pub(crate) async fn started<'a>(ctx: &Ctx<'a>, entry: &Entry, attempt: u32) {
    let record = changed(ctx, entry.seq, None, |r| r.attempts = attempt);
    let event = Event::StepStarted {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        kind: entry.kind,
        depth: entry.depth,
        attempt,
    };
    let run = ctx.run;
    commit_with(ctx, vec![event], false, move |txn| match &record {
        Some(r) => put_step_in(txn, run, r),
        None => Ok(()),
    })
    .await;
}

/// Records how a step ended: its record, the transcript's `step_finished` and, for a
/// step that succeeded, the cache's result of it (`stored`) in one commit, durable for a
/// leaf (it did work that must not run again), with the ends of leaves that end at the
/// same time ([`Store::commit_as`]); without a sync for a step that only holds others
/// (`do:`, `in_parallel:`, ...), which did nothing of its own: its children's records are
/// durable, and a crash that loses its end leaves it running, to go on through them.
/// The outcome and the record are one commit, so a run killed around it finds both or
/// neither: a step its record calls succeeded has its outcome stored, and is never run
/// again. `step_finished` is published after that commit and shown once it is durable.
pub(crate) async fn ended<'a>(
    ctx: &Ctx<'a>,
    step: &Step,
    entry: &Entry,
    done: &Done,
    started: Instant,
    stored: Option<super::stored::Stored>,
) {
    let (status, failure) = (StepStatus::from(done.status), done.failure.clone());
    let lasting = Kind::of(step).is_leaf();
    let took = started.elapsed();
    let change = move |r: &mut StepRecord| {
        r.status = status;
        r.duration_ms = Some(millis(took));
        r.set_failure(failure);
    };
    let record = changed(ctx, entry.seq, None, change);
    let event = finished_event(ctx, entry, done, took);
    let run = ctx.run;
    commit_with(ctx, vec![event], lasting, move |txn| {
        if let Some(r) = &record {
            put_step_in(txn, run, r)?;
        }
        match &stored {
            Some(s) => s.put_in(txn),
            None => Ok(()),
        }
    })
    .await;
}

/// Commits `events` in one transaction with what `also` writes (a step's record, its
/// cache result), durably when `lasting` (sharing the sync of steps that end at the same
/// time), off the async threads, then shows them. A failure does not stop the step; the
/// first one is kept and makes the run exit 2 at its end (as [`write_state`]).
pub(crate) async fn commit_with<'a>(
    ctx: &Ctx<'a>,
    events: Vec<Event>,
    lasting: bool,
    also: impl Fn(&redb::WriteTransaction) -> Result<(), StateError> + Send + 'static,
) {
    let (store, transcript) = (ctx.store.clone(), ctx.transcript.clone());
    let result = tokio::task::spawn_blocking(move || {
        let lines = transcript.lines_of(&events);
        let written = store.commit_as(lasting, |durability| {
            if transcript.journal_all_with(&lines, durability, &also)? {
                return Ok(());
            }
            // No run journal (a worker's step): the writes alone.
            store.write_in(durability, &also)
        });
        transcript.show_all(&events, lines);
        written.map_err(|e| e.to_string())
    });
    let error = match result.await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(e) => e.to_string(),
    };
    keep_state_error(ctx, error);
}

/// Adds a leaf step that ran to the execution log (containers record nothing).
pub(crate) fn log_leaf<'a>(ctx: &Ctx<'a>, step: &Step, entry: &Entry) {
    if !Kind::of(step).is_leaf() {
        return;
    }
    // A get is logged under the resource it fetched (`resource:` renames only its
    // artifact), as `steps` records it.
    let name = match &step.kind {
        StepKind::Get(crate::pipeline::GetStep { resource, .. }) => resource.value.clone(),
        _ => entry.name.clone(),
    };
    log_as(ctx, entry, name);
}

/// Adds `name` to the execution log at `entry` (a cell under its step's path and its
/// index).
pub(crate) fn log_as<'a>(ctx: &Ctx<'a>, entry: &Entry, name: String) {
    let path = match CellAt::of(entry) {
        Some(at) => ctx
            .outline
            .entries
            .get(at.seq as usize)
            .map_or_else(|| entry.path.clone(), |e| e.path.clone()),
        None => entry.path.clone(),
    };
    let cell = entry.cell;
    ctx.state.with(|s| s.log.push(Logged { path, cell, name }));
}

/// Shows that a step (or one attempt of it) ended, with what its record holds.
pub(crate) fn finished<'a>(ctx: &Ctx<'a>, entry: &Entry, done: &Done, took: Duration) {
    ctx.emit(finished_event(ctx, entry, done, took));
}

/// The transcript's `step_finished` of a step (or one attempt of it), with what its
/// record holds.
pub(crate) fn finished_event<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    done: &Done,
    took: Duration,
) -> Event {
    let (exit_code, verdict) = ctx
        .state
        .with(|s| {
            s.records
                .get(entry.seq as usize)
                .map(|r| (r.produced.exit_code, r.produced.verdict.clone()))
        })
        .unwrap_or_default();
    Event::StepFinished {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        kind: entry.kind,
        depth: entry.depth,
        status: StepStatus::from(done.status),
        duration_ms: millis(took),
        exit_code,
        verdict,
        error: done.error().map(str::to_owned),
        failure: done.kind(),
        asserts: done.asserts.clone(),
    }
}

/// Changes a step's record in memory only (as [`update`]): what the step's next commit
/// writes with it, its start or its end.
pub(crate) fn change<'a>(ctx: &Ctx<'a>, seq: u32, change: impl FnOnce(&mut StepRecord)) {
    changed(ctx, seq, None, change);
}

/// Changes a step's record in memory only (a leaf that may be a cell, as [`update_at`]):
/// what the step's next commit writes with it, its start or its end.
pub(crate) fn change_at<'a>(ctx: &Ctx<'a>, entry: &Entry, change: impl FnOnce(&mut StepRecord)) {
    changed(ctx, entry.seq, CellAt::of(entry), change);
}

/// `update` for a leaf that may be an `across:` cell: a cell also keeps the
/// record as its own change left it, since a sibling may change the shared one
/// before the cell's outcome is stored.
pub(crate) async fn update_at<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    change: impl FnOnce(&mut StepRecord),
) {
    update_in(ctx, entry.seq, CellAt::of(entry), change).await;
}

pub(super) async fn update_in<'a>(
    ctx: &Ctx<'a>,
    seq: u32,
    cell: Option<CellAt>,
    change: impl FnOnce(&mut StepRecord),
) {
    let Some(record) = changed(ctx, seq, cell, change) else {
        return;
    };
    let run = ctx.run;
    write_state(ctx, move |store| store.put_step(run, &record)).await;
}

/// Changes the record of step `seq` (and a cell's own view of it) in memory; returns the
/// record to write.
fn changed<'a>(
    ctx: &Ctx<'a>,
    seq: u32,
    cell: Option<CellAt>,
    change: impl FnOnce(&mut StepRecord),
) -> Option<StepRecord> {
    ctx.state.with(|s| {
        let r = s.records.get_mut(seq as usize)?;
        change(r);
        let record = r.clone();
        if let Some(at) = cell {
            s.cell_records.insert(at, record.clone());
        }
        Some(record)
    })
}

/// How long the execution log is now, to reorder what a group adds after it.
pub(crate) fn log_mark<'a>(ctx: &Ctx<'a>) -> usize {
    ctx.state.with(|s| s.log.len())
}

/// Puts the entries the group at `path` added since `mark` in declaration order (its
/// children by their index after `path/`, or an `across:` step's cells by their
/// index), leaving entries of other steps where they are.
pub(crate) fn order_log<'a>(ctx: &Ctx<'a>, mark: usize, path: &str, of: Members) {
    let prefix = format!("{path}/");
    let index = |l: &Logged| -> Option<usize> {
        match of {
            Members::Children => l
                .path
                .strip_prefix(&prefix)?
                .split('/')
                .next()?
                .parse()
                .ok(),
            Members::Cells if l.path == path => l.cell.map(|c| c as usize),
            Members::Cells => None,
        }
    };
    ctx.state.with(|s| {
        let log = &mut s.log;
        let slots: Vec<usize> = (mark..log.len())
            .filter(|&i| index(&log[i]).is_some())
            .collect();
        let mut mine: Vec<Logged> = slots.iter().map(|&i| log[i].clone()).collect();
        mine.sort_by_key(|l| index(l));
        for (slot, entry) in slots.into_iter().zip(mine) {
            log[slot] = entry;
        }
    });
}
