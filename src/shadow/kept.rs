//! The shadows a server ran (`POST /api/v1/runs/{id}/shadow`), kept in the state file for
//! the comparison page: table `shadows.v1`, `(source run, shadow number)` → [`ShadowRecord`]
//! (JSON). A shadow is not a run: it has no row among the runs, no events and no artifacts.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::report::{Call, ShadowReport};
use crate::run::state::StateError;
use crate::run::{FailureKind, StepFailure};

const SHADOWS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("shadows.v1");

/// One shadow step's own tool calls and how long it took, beside its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTrace {
    /// The step's number in the source run.
    pub seq: u32,
    /// Its tool calls, the verdict call left out (as the report compares them).
    pub calls: Vec<Call>,
    /// How long the shadow step took, in milliseconds.
    pub duration_ms: u64,
}

/// A shadow's report and each step's calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Traced {
    /// What changed, as `treadle run --shadow` reports it.
    pub report: ShadowReport,
    /// Per agent step, in the report's order.
    pub traces: Vec<StepTrace>,
}

/// Where a kept shadow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShadowStatus {
    /// Its steps are running now.
    Running,
    /// It ran: its report is there (whether or not anything changed).
    Done,
    /// It could not be made, or was stopped: `error` says why.
    Failed,
}

/// One shadow of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowRecord {
    /// The source run.
    pub run: u64,
    /// Its number among the run's shadows, from 1.
    pub n: u32,
    /// The model every agent step ran on (`None`: each agent's own).
    pub model: Option<String>,
    /// Where it is.
    pub status: ShadowStatus,
    /// Whether a step's outcome changed (as `treadle run --shadow` exits 1), once done.
    pub changed: Option<bool>,
    /// When it started (Unix milliseconds).
    pub started_ms: u64,
    /// When it ended.
    pub ended_ms: Option<u64>,
    /// Its report and calls, once done.
    pub traced: Option<Traced>,
    /// Why it failed.
    pub error: Option<String>,
    /// The kind of that failure (`interrupted`, `configuration`, ...); absent in records
    /// written before kinds were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
}

impl ShadowRecord {
    /// Marks it failed with `failure` (message and kind).
    pub fn set_failure(&mut self, failure: StepFailure) {
        self.status = ShadowStatus::Failed;
        self.failure = Some(failure.kind);
        self.error = Some(failure.message);
    }
}

/// Adds a running shadow of `run` under the next free number, and returns it.
pub fn begin(
    db: &Database,
    run: u64,
    model: Option<String>,
    started_ms: u64,
) -> Result<ShadowRecord, StateError> {
    // One write transaction: two shadows begun at once get two numbers.
    let txn = db.begin_write()?;
    let record = {
        let mut table = txn.open_table(SHADOWS)?;
        let last = table
            .range((run, 0)..=(run, u32::MAX))?
            .next_back()
            .transpose()?
            .map_or(0, |(k, _)| k.value().1);
        let record = ShadowRecord {
            run,
            n: last + 1,
            model,
            status: ShadowStatus::Running,
            changed: None,
            started_ms,
            ended_ms: None,
            traced: None,
            error: None,
            failure: None,
        };
        table.insert((run, record.n), encode(&record)?.as_slice())?;
        record
    };
    txn.commit()?;
    Ok(record)
}

/// Writes `record` over the one of the same run and number.
pub fn put(db: &Database, record: &ShadowRecord) -> Result<(), StateError> {
    let txn = db.begin_write()?;
    txn.open_table(SHADOWS)?
        .insert((record.run, record.n), encode(record)?.as_slice())?;
    txn.commit()?;
    Ok(())
}

/// The shadows of `run`, oldest first.
pub fn list(db: &Database, run: u64) -> Result<Vec<ShadowRecord>, StateError> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(SHADOWS) {
        Ok(t) => t,
        // A state file in which no server ran a shadow yet.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for row in table.range((run, 0)..=(run, u32::MAX))? {
        let (_, value) = row?;
        out.push(decode(value.value())?);
    }
    Ok(out)
}

/// Marks the shadows still `running` as failed: the server that ran them stopped (called
/// when a server starts, before it runs anything).
pub fn abandon_running(db: &Database, now_ms: u64) -> Result<u32, StateError> {
    let txn = db.begin_write()?;
    let mut count = 0;
    {
        let mut table = txn.open_table(SHADOWS)?;
        let mut stale = Vec::new();
        for row in table.iter()? {
            let (_, value) = row?;
            let record: ShadowRecord = decode(value.value())?;
            if record.status == ShadowStatus::Running {
                stale.push(record);
            }
        }
        for mut record in stale {
            record.status = ShadowStatus::Failed;
            record.ended_ms = Some(now_ms);
            record.set_failure(StepFailure::new(
                FailureKind::Interrupted,
                "the server stopped before it ended",
            ));
            table.insert((record.run, record.n), encode(&record)?.as_slice())?;
            count += 1;
        }
    }
    txn.commit()?;
    Ok(count)
}

fn encode(record: &ShadowRecord) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(record).map_err(|e| StateError::Format(e.into()))
}

fn decode(bytes: &[u8]) -> Result<ShadowRecord, StateError> {
    serde_json::from_slice(bytes).map_err(|e| StateError::Format(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadows_are_numbered_per_run_and_read_back_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Database::create(dir.path().join("s.redb")).expect("db");
        assert_eq!(list(&db, 1).expect("list"), Vec::new(), "no table yet");
        let a = begin(&db, 1, None, 10).expect("begin");
        let b = begin(&db, 1, Some("local/x".to_owned()), 20).expect("begin");
        let other = begin(&db, 2, None, 30).expect("begin");
        assert_eq!((a.n, b.n, other.n), (1, 2, 1));
        let mut done = b.clone();
        done.status = ShadowStatus::Done;
        done.changed = Some(true);
        put(&db, &done).expect("put");
        assert_eq!(list(&db, 1).expect("list"), vec![a, done.clone()]);
        assert_eq!(abandon_running(&db, 99).expect("abandon"), 2);
        let after = list(&db, 1).expect("list");
        assert_eq!(after[0].status, ShadowStatus::Failed);
        assert_eq!(after[0].ended_ms, Some(99));
        assert_eq!(after[1], done, "a finished shadow is left as it was");
    }
}
