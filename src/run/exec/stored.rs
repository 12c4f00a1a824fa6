//! A succeeded step's outcome on its way into the commit of the step's end: written by
//! `record::ended` in that commit, built by `cached::cache_after`, shared through NATS after.

use std::sync::Arc;

use crate::cache::StepCache;
use crate::cache::records::SuccessRecord;
use crate::run::state::StateError;

/// A succeeded step's outcome, ready to be stored in the commit of its end
/// (`super::record::ended`).
pub(crate) struct Stored {
    pub(super) cache: Arc<StepCache>,
    pub(super) path: String,
    pub(super) outcome: SuccessRecord,
    pub(super) replay: bool,
    /// Its output trees, by output name, when it is shared through NATS.
    pub(super) dirs: Option<Vec<(String, std::path::PathBuf)>>,
}

/// What is shared through NATS once a step's outcome is in the state file.
pub(crate) struct Shared {
    pub(super) outcome: SuccessRecord,
    pub(super) dirs: Vec<(String, std::path::PathBuf)>,
}

impl Stored {
    /// Writes the outcome in the caller's transaction.
    pub(crate) fn put_in(&self, txn: &redb::WriteTransaction) -> Result<(), StateError> {
        self.cache
            .put_success_in(txn, &self.path, &self.outcome, self.replay)
            .map_err(|e| StateError::Tables(Box::new(e)))
    }

    /// What to share once it is stored (under `--nats`, a replayable outcome).
    pub(crate) fn shared(&self) -> Option<Shared> {
        let dirs = self.dirs.clone()?;
        Some(Shared {
            outcome: self.outcome.clone(),
            dirs,
        })
    }
}
