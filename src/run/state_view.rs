//! A state file opened to read only: `treadle runs` on a `.treadle` it may not write (a
//! read-only mount, a directory of another user's, a copy kept for an audit).
//!
//! [`super::Store::open`] takes the state file's lock and opens the database to write,
//! both of which need write access; a view needs neither. redb refuses a read-only open
//! while another process has the file open to write, so a view is what `runs` falls back
//! to, not what it tries first: a live run's state is read through the store (or the
//! server) as before.

use std::path::{Path, PathBuf};

use super::state::{RunRecord, StateError, StepRecord, read_run, read_runs, read_steps};

/// A read-only state file.
pub struct StateView {
    db: redb::ReadOnlyDatabase,
}

impl StateView {
    /// Opens the state file at `path` to read, writing nothing (not even its lock file).
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let db = redb::ReadOnlyDatabase::open(path).map_err(|source| StateError::Open {
            path: PathBuf::from(path),
            source: Box::new(source),
        })?;
        Ok(Self { db })
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRecord>, StateError> {
        read_runs(&self.db)
    }

    /// One run.
    pub fn run(&self, id: u64) -> Result<RunRecord, StateError> {
        read_run(&self.db, id)
    }

    /// A run's steps in plan order.
    pub fn steps(&self, run: u64) -> Result<Vec<StepRecord>, StateError> {
        read_steps(&self.db, run)
    }
}
