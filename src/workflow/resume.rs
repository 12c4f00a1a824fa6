//! Which run a workflow's run resumes ([`Resume`]): none, one by its number, or the newest
//! unfinished run of the same workflow in the state file (`Options::resume_last`), so
//! that a program killed mid-run and started again goes on without being told a number.

use std::sync::Arc;

use crate::cache::Start;
use crate::run::state::RunRecord;
use crate::run::{RunError, RunStatus, StateError, Store};

/// The run a workflow's run resumes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Resume {
    /// None: a fresh run (the cache still replays unchanged steps that may be replayed).
    #[default]
    Fresh,
    /// This run (`treadle run --resume RUN`).
    Run(u64),
    /// The newest run of this workflow in the state file when it is unfinished (see
    /// [`unfinished`]); else a fresh run.
    Last,
}

impl From<Option<u64>> for Resume {
    fn from(run: Option<u64>) -> Self {
        run.map_or(Self::Fresh, Self::Run)
    }
}

impl Resume {
    /// The run's start in `store` for workflow `name`; with the run it resumes, if any.
    pub(super) async fn start(self, store: &Arc<Store>, name: &str) -> Result<Start, RunError> {
        let run = match self {
            Self::Fresh => None,
            Self::Run(run) => Some(run),
            Self::Last => {
                let (store, name) = (store.clone(), name.to_owned());
                tokio::task::spawn_blocking(move || store.runs())
                    .await
                    .map_err(StateError::from)??
                    .iter()
                    .rev()
                    .find(|r| is_of(r, &name))
                    .filter(|r| unfinished(r.status))
                    .map(|r| r.id)
            }
        };
        Ok(run.map_or(Start::Fresh, Start::Resume))
    }
}

/// Whether run `r` is one of workflow `name`'s (a workflow's run has its name as both its
/// pipeline and its job; a YAML job of that name is a file's).
fn is_of(r: &RunRecord, name: &str) -> bool {
    r.pipeline == name && r.job == name
}

/// Whether a run of this status is left to resume: its process stopped before the run
/// ended (`running` in the file: killed, or the machine went down), or it was interrupted
/// (`aborted`: Ctrl-C, or a resume of it that was itself stopped). A run that ended
/// succeeded, failed or errored is finished: a run after it starts fresh, its cache
/// replaying what it may. The watcher resumes a build by the same rule.
fn unfinished(status: RunStatus) -> bool {
    matches!(status, RunStatus::Running | RunStatus::Aborted)
}
