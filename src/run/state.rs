//! The state file: runs, their steps, agent events, usage and approvals in one redb
//! database, `.treadle/state.redb`, which is also the agent sessions' journal.
//!
//! The store owns the file: it opens the redb database and then the session [`Journal`]
//! inside it ([`Journal::open_in`]), which adds its writer thread and its tables
//! (`events.v1`, `event_ids.v1`, `session_seqs.v1`) and never hands the database out.
//! redb serializes write transactions, so the store's writes simply take turns with the
//! journal's batches.
//!
//! Values are versioned bytes (a format byte, then JSON) so that a later schema can still
//! read older files. redb is synchronous; the executor calls this from blocking tasks.
//! One process opens a state file at a time ([`super::state_lock`], then redb's own lock):
//! a second `treadle run` on the same pipeline fails with [`StateError::Held`], naming the
//! process that holds it, instead of corrupting anything.
//!
//! A step's end is its one durable write; ends that come together share a sync
//! (`group_sync`). The store's errors are `error`'s [`StateError`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use treadle_session::Journal;
use treadle_session::journal::{self, JournalOpenError, JournalOptions};

pub use super::approval_record::{ApprovalRecord, ApprovalStatus};
use super::failure::{FailureKind, StepFailure};
pub use super::state_records::{Produced, RunRecord, RunStatus, StepRecord, StepStatus, Streams};

mod error;
mod group_sync;
pub use error::StateError;
use group_sync::GroupSync;

const RUNS: TableDefinition<u64, &[u8]> = TableDefinition::new("runs");
const STEPS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("steps");
const AGENT_EVENTS: TableDefinition<(u64, u32, u32), &[u8]> = TableDefinition::new("agent_events");
const APPROVALS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("approvals");

/// Format byte of every value written by this version.
/// The open state file.
pub struct Store {
    db: Arc<Database>,
    /// Steps that end together share a sync.
    syncs: GroupSync,
    journal: Journal,
    path: PathBuf,
    // Dropped last: the lock outlives the journal and database handles.
    lock: super::state_lock::Held,
}

/// How a run ended, kept in the state file's lock file when the state file could not take
/// it (a full disk), and recorded by the next process that opens the state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UnrecordedEnd {
    run: u64,
    status: RunStatus,
    duration_ms: u64,
    error: Option<String>,
    /// Absent in notes written before kinds were kept.
    #[serde(default)]
    failure: Option<FailureKind>,
}

/// The most of an error message kept in a note: the note must fit in the lock file's
/// reserved bytes with the holder's line.
const NOTE_ERROR_MAX: usize = 2048;

pub(super) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StateError> {
    Ok(crate::stored_json::encode(v)?)
}

pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StateError> {
    Ok(crate::stored_json::decode(bytes)?)
}

impl Store {
    /// Opens (or creates) the state file, creating its directory: the session journal
    /// first, then the store's tables beside the journal's.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let lock = super::state_lock::acquire(path)?;
        let open_error = |e: JournalOpenError| match e {
            JournalOpenError::AlreadyOpen { .. } => StateError::Busy(path.to_path_buf()),
            JournalOpenError::CreateDir { path, source } => StateError::Dir { path, source },
            JournalOpenError::Open { source, .. } => StateError::Open {
                path: path.to_path_buf(),
                source: Box::new(source),
            },
            other => StateError::Journal(other),
        };
        // The store owns the file; the journal is opened inside it and keeps to its tables.
        let db = Arc::new(journal::open_database(path).map_err(open_error)?);
        let journal = Journal::open_in(path, Arc::clone(&db), JournalOptions::default())
            .map_err(open_error)?;
        let txn = db.begin_write()?;
        txn.open_table(RUNS)?;
        txn.open_table(STEPS)?;
        txn.open_table(AGENT_EVENTS)?;
        txn.open_table(APPROVALS)?;
        txn.commit()?;
        let mut store = Self {
            db,
            syncs: GroupSync::default(),
            journal,
            path: path.to_path_buf(),
            lock,
        };
        store.record_noted_end();
        Ok(store)
    }

    /// Records the end of a run that the previous holder of the lock could not write here
    /// (it noted it in the lock file, [`Store::note_end`]), if the run is still marked
    /// running. The note stays until this succeeds, so a disk still full is tried again at
    /// the next open.
    fn record_noted_end(&mut self) {
        let Some(note) = self.lock.noted() else {
            return;
        };
        let end: UnrecordedEnd = match serde_json::from_str(note) {
            Ok(end) => end,
            Err(e) => {
                crate::console::tell!(
                    "treadle: ignoring an unreadable note in the state file's lock file: {e}"
                );
                let _ = self.lock.clear_note();
                return;
            }
        };
        let open = matches!(self.run(end.run), Ok(r) if r.status == RunStatus::Running);
        if open {
            let UnrecordedEnd {
                run,
                status,
                duration_ms,
                error,
                failure,
            } = end;
            let failure = error.map(|e| StepFailure::new(failure.unwrap_or(FailureKind::Other), e));
            let why = "not recorded: the state file could not be written when the run ended";
            if let Err(e) = self.close_run(run, status, duration_ms, failure, Some(why)) {
                crate::console::tell!(
                    "treadle: run {run} ended {} but the state file still cannot record it: {e}",
                    status.as_str()
                );
                return;
            }
            crate::console::tell!(
                "treadle: recorded run {run} as {}: the process that ran it could not write the state file (full disk?)",
                status.as_str()
            );
        }
        let _ = self.lock.clear_note();
    }

    /// Keeps how run `run` ended in the state file's lock file, for when
    /// [`Store::end_run`] failed (a full disk: redb also refuses every write after an I/O
    /// error until the file is reopened): the next process to open the state file records
    /// it. Writes over bytes reserved when the lock was taken, so it needs no free space.
    pub fn note_end(
        &self,
        run: u64,
        status: RunStatus,
        duration_ms: u64,
        failure: Option<StepFailure>,
    ) -> std::io::Result<()> {
        let kind = failure.as_ref().map(|f| f.kind);
        let error = failure.map(|f| {
            let mut e = f.message;
            super::state_lock::truncate(&mut e, NOTE_ERROR_MAX);
            e
        });
        let end = UnrecordedEnd {
            run,
            status,
            duration_ms,
            error,
            failure: kind,
        };
        let note = serde_json::to_string(&end).map_err(std::io::Error::other)?;
        self.lock.note(&note)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, for the tables other modules keep in the same file (the step
    /// cache's, `crate::cache::records`).
    pub fn database(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// The agent sessions' journal, in the same file.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Writes an approval's record (when it is asked, and again when it is answered).
    pub fn put_approval(&self, record: &ApprovalRecord) -> Result<(), StateError> {
        let txn = self.db.begin_write()?;
        txn.open_table(APPROVALS)?
            .insert((record.run, record.seq), encode(record)?.as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Every approval asked, oldest run first (`pending` ones are still waiting, or their
    /// run's process died while waiting).
    pub fn approvals(&self) -> Result<Vec<ApprovalRecord>, StateError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(APPROVALS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            out.push(decode(e?.1.value())?);
        }
        Ok(out)
    }

    /// Starts a run: gives it the next id and records it with its steps, all pending.
    pub fn begin_run(
        &self,
        pipeline: &str,
        job: &str,
        started_ms: u64,
        steps: &[StepRecord],
    ) -> Result<u64, StateError> {
        let txn = self.db.begin_write()?;
        let id = {
            let mut runs = txn.open_table(RUNS)?;
            let id = runs.last()?.map_or(1, |(k, _)| k.value() + 1);
            let rec = RunRecord {
                id,
                pipeline: pipeline.to_owned(),
                job: job.to_owned(),
                status: RunStatus::Running,
                started_ms,
                duration_ms: None,
                error: None,
                failure: None,
            };
            runs.insert(id, encode(&rec)?.as_slice())?;
            let mut table = txn.open_table(STEPS)?;
            for s in steps {
                table.insert((id, s.seq), encode(s)?.as_slice())?;
            }
            id
        };
        txn.commit()?;
        Ok(id)
    }

    /// Writes a step's record. Only a step's final status is made durable: the transitions
    /// before it (running, attempt, exit code) are committed without a sync, and the final
    /// commit persists them too. A crash can lose only those, and the run is then recorded
    /// as running with the step not finished, which is true.
    pub fn put_step(&self, run: u64, step: &StepRecord) -> Result<(), StateError> {
        let lasting = !matches!(
            step.status,
            StepStatus::Pending | StepStatus::Queued | StepStatus::Running
        );
        self.put_step_as(run, step, lasting)
    }

    /// Writes a step's record, made durable when `lasting`: then it shares its sync with
    /// the records of steps that end at the same time (a group commit, [`GroupSync`]), and
    /// is durable when this returns.
    pub fn put_step_as(
        &self,
        run: u64,
        step: &StepRecord,
        lasting: bool,
    ) -> Result<(), StateError> {
        self.commit_as(lasting, |durability| {
            self.write_in(durability, |txn| put_step_in(txn, run, step))
        })
    }

    /// Runs `write`, one transaction's commit at the durability it is given (the caller's,
    /// which may journal events with it, `super::event_log::EventLog::record_all_with`),
    /// made durable when `lasting`: then it shares its sync with the writes of steps that
    /// end at the same time ([`GroupSync`]) and is durable when this returns; otherwise it
    /// is committed without a sync.
    pub fn commit_as(
        &self,
        lasting: bool,
        write: impl FnOnce(redb::Durability) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        if !lasting {
            return write(redb::Durability::None);
        }
        self.syncs.durable(write, || {
            // An empty durable commit: it persists every commit before it.
            self.db.begin_write()?.commit()?;
            Ok(())
        })
    }

    /// One write transaction: what `write` writes, committed at `durability` (for
    /// [`Store::commit_as`], when no event journal takes the write in its commit).
    pub fn write_in(
        &self,
        durability: redb::Durability,
        write: impl FnOnce(&redb::WriteTransaction) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let mut txn = self.db.begin_write()?;
        // Refused only where durability cannot be lowered; the commit then just syncs.
        let _ = txn.set_durability(durability);
        write(&txn)?;
        txn.commit()?;
        Ok(())
    }

    /// Ends a run (with why it did not succeed), turning every step still pending or
    /// running into skipped or aborted.
    pub fn end_run(
        &self,
        run: u64,
        status: RunStatus,
        duration_ms: u64,
        failure: Option<StepFailure>,
    ) -> Result<(), StateError> {
        self.close_run(run, status, duration_ms, failure, None)
    }

    /// [`Store::end_run`]; `unrecorded`: why the steps left open have no record of their
    /// own (given as their error), instead of "interrupted".
    fn close_run(
        &self,
        run: u64,
        status: RunStatus,
        duration_ms: u64,
        failure: Option<StepFailure>,
        unrecorded: Option<&str>,
    ) -> Result<(), StateError> {
        let txn = self.db.begin_write()?;
        end_run_in(&txn, run, status, duration_ms, failure, unrecorded)?;
        txn.commit()?;
        Ok(())
    }

    /// Appends one event of an agent step (kept in order per step).
    pub fn append_agent_event(
        &self,
        run: u64,
        seq: u32,
        event: &serde_json::Value,
    ) -> Result<(), StateError> {
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(AGENT_EVENTS)?;
            let next = t
                .range((run, seq, 0)..=(run, seq, u32::MAX))?
                .next_back()
                .transpose()?
                .map_or(0, |(k, _)| k.value().2 + 1);
            t.insert((run, seq, next), encode(event)?.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRecord>, StateError> {
        read_runs(&*self.db)
    }

    /// One run.
    pub fn run(&self, id: u64) -> Result<RunRecord, StateError> {
        read_run(&*self.db, id)
    }

    /// A run's steps in plan order.
    pub fn steps(&self, run: u64) -> Result<Vec<StepRecord>, StateError> {
        read_steps(&*self.db, run)
    }

    /// An agent step's recorded events.
    pub fn agent_events(&self, run: u64, seq: u32) -> Result<Vec<serde_json::Value>, StateError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(AGENT_EVENTS)?;
        let mut out = Vec::new();
        for e in t.range((run, seq, 0)..=(run, seq, u32::MAX))? {
            out.push(decode(e?.1.value())?);
        }
        Ok(out)
    }
}

/// Every run of `db`, oldest first (a [`Store`]'s, or a read-only view's).
pub(super) fn read_runs(db: &impl ReadableDatabase) -> Result<Vec<RunRecord>, StateError> {
    let txn = db.begin_read()?;
    let t = txn.open_table(RUNS)?;
    let mut out = Vec::new();
    for e in t.iter()? {
        out.push(decode(e?.1.value())?);
    }
    Ok(out)
}

/// One run of `db`.
pub(super) fn read_run(db: &impl ReadableDatabase, id: u64) -> Result<RunRecord, StateError> {
    let txn = db.begin_read()?;
    let t = txn.open_table(RUNS)?;
    match t.get(id)? {
        Some(v) => decode(v.value()),
        None => Err(StateError::NoRun(id)),
    }
}

/// A run's steps in `db`, in plan order.
pub(super) fn read_steps(
    db: &impl ReadableDatabase,
    run: u64,
) -> Result<Vec<StepRecord>, StateError> {
    let txn = db.begin_read()?;
    let t = txn.open_table(STEPS)?;
    let mut out = Vec::new();
    for e in t.range((run, 0)..=(run, u32::MAX))? {
        out.push(decode(e?.1.value())?);
    }
    Ok(out)
}

/// Writes step record `step` of run `run` in the caller's transaction `txn` (which the
/// caller commits with what else belongs to it: the step's events, its cache result).
pub(crate) fn put_step_in(
    txn: &redb::WriteTransaction,
    run: u64,
    step: &StepRecord,
) -> Result<(), StateError> {
    txn.open_table(STEPS)?
        .insert((run, step.seq), encode(step)?.as_slice())?;
    Ok(())
}

/// [`Store::end_run`] in a transaction of the caller's (the one that journals the run's
/// `run_finished` event with it, see `super::event_log::EventLog::record_with`).
pub(crate) fn end_run_in(
    txn: &redb::WriteTransaction,
    run: u64,
    status: RunStatus,
    duration_ms: u64,
    failure: Option<StepFailure>,
    unrecorded: Option<&str>,
) -> Result<(), StateError> {
    {
        let mut runs = txn.open_table(RUNS)?;
        let mut rec: RunRecord = match runs.get(run)? {
            Some(v) => decode(v.value())?,
            None => return Err(StateError::NoRun(run)),
        };
        rec.status = status;
        rec.duration_ms = Some(duration_ms);
        rec.failure = failure.as_ref().map(|f| f.kind);
        rec.error = failure.map(|f| f.message);
        runs.insert(run, encode(&rec)?.as_slice())?;
        let mut steps = txn.open_table(STEPS)?;
        let mut open = Vec::new();
        for entry in steps.range((run, 0)..=(run, u32::MAX))? {
            let (k, v) = entry?;
            let mut s: StepRecord = decode(v.value())?;
            match s.status {
                StepStatus::Pending => s.status = StepStatus::Skipped,
                // Its process stopped while it ran (or the run ended around it).
                StepStatus::Queued | StepStatus::Running => {
                    s.status = StepStatus::Aborted;
                    s.failure = Some(FailureKind::Interrupted);
                    s.error.get_or_insert_with(|| "interrupted".to_owned());
                }
                _ => continue,
            }
            if let Some(why) = unrecorded {
                s.error = Some(why.to_owned());
            }
            open.push((k.value(), s));
        }
        for (k, s) in open {
            steps.insert(k, encode(&s)?.as_slice())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{StateError, StepRecord};

    #[test]
    fn a_redb_error_is_kept_whole_with_the_message_as_before() {
        let e = StateError::from(redb::Error::Corrupted("bad page".to_owned()));
        assert!(
            matches!(&e, StateError::Db(redb::Error::Corrupted(why)) if why == "bad page"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("state file error: "), "{e}");
        assert!(e.to_string().contains("bad page"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        // After a failed write redb says only `PreviousIo`: the store says what it means.
        let e = StateError::from(redb::Error::PreviousIo);
        assert!(matches!(e, StateError::EarlierWriteFailed), "{e:?}");
    }

    #[test]
    fn a_step_record_written_as_replayed_from_reads_as_cached_from() {
        let old = r#"{"seq":1,"path":"0","name":"build","kind":"task","status":"succeeded",
                      "replayed_from":3}"#;
        let record: StepRecord = serde_json::from_str(old).expect("an older record");
        assert_eq!(record.cached_from, Some(3));
        let now = serde_json::to_value(&record).expect("encode");
        assert_eq!(now["cached_from"], 3);
        assert!(now.get("replayed_from").is_none());
    }

    #[test]
    fn a_record_written_before_kinds_reads_without_one_and_new_statuses_round_trip() {
        let old = r#"{"seq":0,"path":"0","name":"build","kind":"task","status":"failed",
                      "error":"interrupted"}"#;
        let record: StepRecord = serde_json::from_str(old).expect("an older record");
        assert_eq!(record.failure, None);
        assert_eq!(record.error.as_deref(), Some("interrupted"));
        for status in ["errored", "aborted"] {
            let json = format!(
                r#"{{"seq":0,"path":"0","name":"b","kind":"task","status":"{status}","failure":"interrupted"}}"#
            );
            let record: StepRecord = serde_json::from_str(&json).expect("a new record");
            assert_eq!(record.status.as_str(), status);
            assert_eq!(
                serde_json::to_value(&record).expect("encode")["failure"],
                "interrupted"
            );
        }
    }
}
