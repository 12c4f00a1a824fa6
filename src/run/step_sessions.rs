//! The session each agent step of a run is on, kept in the state file so that a run that
//! stops mid-step (SIGKILL, power loss, a clean stop) is continued from that session.
//!
//! Table `step_sessions.v1`: `(run, outline path)` → [`StepSession`] (versioned JSON). A row
//! is written, synced, when the step's session has started and before its first model
//! call (one fsync per agent step), so no model call is committed without it.

use std::path::PathBuf;

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};
use treadle_session::event::SessionId;

use super::state::{StateError, decode, encode};

const STEP_SESSIONS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("step_sessions.v1");

/// Where one agent step of one run was working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSession {
    /// Its session in the state file's journal.
    pub session: SessionId,
    /// The step's cache key (hex) when it started: a resume continues the session only for
    /// the same key, as it reuses a record only for the same key.
    pub key: Option<String>,
    /// The step directory its tools worked in.
    pub dir: PathBuf,
}

/// Keeps `row` as the session of the step at outline `path` of `run`.
pub fn note(db: &Database, run: u64, path: &str, row: &StepSession) -> Result<(), StateError> {
    // Synced: the session journal keeps its own write-ahead log, so a later append of the
    // session does not persist this row.
    let txn = db.begin_write()?;
    txn.open_table(STEP_SESSIONS)?
        .insert((run, path), encode(row)?.as_slice())?;
    txn.commit()?;
    Ok(())
}

/// The session of the step at outline `path` of `run`, if it started one.
pub fn of(db: &Database, run: u64, path: &str) -> Result<Option<StepSession>, StateError> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(STEP_SESSIONS) {
        Ok(t) => t,
        // A state file from before this table: no step of it kept a session.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match table.get((run, path))? {
        Some(v) => decode(v.value()).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_session_reads_back_by_run_and_path_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Database::create(dir.path().join("s.redb")).expect("db");
        assert_eq!(of(&db, 1, "0").expect("read"), None, "no table yet");
        let row = StepSession {
            session: SessionId::new(),
            key: Some("ab".to_owned()),
            dir: dir.path().join("steps/1-think-1"),
        };
        note(&db, 1, "1", &row).expect("note");
        assert_eq!(of(&db, 1, "1").expect("read"), Some(row));
        assert_eq!(of(&db, 1, "0").expect("read"), None);
        assert_eq!(of(&db, 2, "1").expect("read"), None);
    }
}
