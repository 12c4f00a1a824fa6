//! `treadle run --record DIR` / `--replay-model DIR`: opening the job's [`ModelTape`] and
//! checking, at the end of a replay, that every recorded model call was made.

use std::path::PathBuf;
use std::sync::Arc;

use super::EXIT_CONFIG;
use crate::model_tape::{ModelTape, TapeError, TapeMode};
use crate::pipeline::Loaded;

/// The tape flags of `treadle run` (clap makes them exclusive).
#[derive(Debug, Default)]
pub(super) struct TapeArgs {
    /// `--record DIR`.
    pub record: Option<PathBuf>,
    /// `--replay-model DIR`.
    pub replay: Option<PathBuf>,
}

impl TapeArgs {
    /// The tape of the job that will run, if a flag asks for one.
    pub(super) fn open(
        &self,
        loaded: &Loaded,
        job: Option<&str>,
    ) -> Result<Option<Arc<ModelTape>>, TapeError> {
        let (mode, dir) = match (&self.record, &self.replay) {
            (Some(dir), _) => (TapeMode::Record, dir),
            (None, Some(dir)) => (TapeMode::Replay, dir),
            (None, None) => return Ok(None),
        };
        // Without --job the run picks the only job; with several it refuses to start, so
        // the fallback name is never used for files that matter.
        let job = job
            .map(str::to_owned)
            .or_else(|| match loaded.pipeline.jobs.as_slice() {
                [only] => Some(only.name.value.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "job".to_owned());
        ModelTape::open(mode, dir, &job).map(|t| Some(Arc::new(t)))
    }
}

/// The run's exit code, turned into a configuration error when a replay that otherwise
/// succeeded left recorded model calls unused: the run diverged from the recording.
pub(super) fn conclude(code: u8, tape: Option<&ModelTape>) -> u8 {
    match tape.map(ModelTape::unused) {
        Some(Err(e)) if code == 0 => {
            crate::console::tell!("{e}");
            EXIT_CONFIG
        }
        _ => code,
    }
}
