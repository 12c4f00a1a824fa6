//! Record and replay of agent steps' model traffic: `treadle run --record DIR` and
//! `treadle run --replay-model DIR`.
//!
//! # How
//!
//! Each agent step's session is pointed at a small HTTP server on `127.0.0.1:0` inside the
//! treadle process ([`ModelTape::open_step`]), started for that step and stopped after it.
//! The session and its HTTP client are unchanged: the step only sees another base URL.
//!
//! * **Record**: the server forwards `POST /v1/chat/completions` to the step's real
//!   endpoint (with its `Authorization` header) and streams the answer back, writing the
//!   request body and the whole streamed answer to files as it goes.
//! * **Replay**: the server compares each request with the recorded one and answers with
//!   the recorded stream; no model server is needed.
//!
//! # Files
//!
//! `DIR/<job>/<step>/NNN.request.json` (pretty JSON) and `NNN.response.sse` (the bytes the
//! endpoint sent), `NNN` counting the step's model calls from `001` in order. Numbering
//! continues across the attempts of a step, so a retried step replays its later attempts
//! too. `<job>` and `<step>` are the names with any character other than ASCII letters,
//! digits, `-`, `_` and `.` replaced by `_`. Headers are not recorded, so the API key never
//! reaches the files in a header; a key the model repeats, or a tool showed it, is masked
//! in both files (plain and encoded forms, also when split across stream chunks) before
//! they are written (`scrub`).
//!
//! # Decisions
//!
//! * Only answers with a 2xx status are recorded: a 429 or 5xx that the client retries is
//!   not part of the conversation, and the retry sends the same body.
//! * Requests are compared as JSON, not as bytes. Tool-call ids are compared up to a
//!   consistent renaming (see `diff`): the local model's ids, and the ids the session makes
//!   up when a model sends none, are random, but which result answers which call must
//!   still agree. Nothing else is ignored.
//! * A mismatch answers the request with HTTP 409 (which the client does not retry), and
//!   the step then fails with the step's name, the call number and the first differing
//!   JSON path. It is an error of the run's inputs, not of the agent, so the run exits
//!   with 2, like a model server that cannot be reached. A replayed run that succeeds but
//!   leaves recorded calls unused also exits with 2 ([`ModelTape::unused`]).
//! * Two steps with the same name in one job share one folder and one numbering; that
//!   replays correctly as long as they run one after the other.

mod diff;
mod record;
mod replay;
mod scrub;
mod server;
mod shared;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub use diff::{Difference, first_difference};
pub use server::StepTape;

/// Whether a tape is being written or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapeMode {
    /// Forward to the real endpoint and write the traffic.
    Record,
    /// Answer from the files.
    Replay,
}

/// Why a tape cannot be used, or why a replayed step does not match its recording.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    /// The tape folder cannot be made or read.
    #[error("model tape {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// `--replay-model DIR` has nothing recorded for the job.
    #[error(
        "model tape {path}: no recording for job `{job}` (record one with `treadle run --record DIR`)"
    )]
    NoRecording {
        /// The folder that should exist.
        path: PathBuf,
        /// The job.
        job: String,
    },
    /// The loopback server could not start.
    #[error("cannot start the model tape server: {0}")]
    Bind(std::io::Error),
    /// A replayed request differs from the recorded one, or was never recorded.
    #[error("replay of step `{step}` does not match the recording: {detail}")]
    Mismatch {
        /// The step.
        step: String,
        /// The call and the first difference.
        detail: String,
    },
    /// Recording failed (the endpoint could not be reached, a file could not be written).
    #[error("recording step `{step}`: {detail}")]
    Record {
        /// The step.
        step: String,
        /// What went wrong.
        detail: String,
    },
    /// A replayed run ended without using all recorded calls.
    #[error("replay did not use every recorded model call: {0}")]
    Unused(String),
}

/// The record or replay tape of one job's run.
#[derive(Debug)]
pub struct ModelTape {
    mode: TapeMode,
    /// `DIR/<job>`.
    root: PathBuf,
    /// Model calls made so far, per step folder.
    counters: Mutex<HashMap<String, Arc<AtomicU32>>>,
}

impl ModelTape {
    /// Opens a tape for `job` under `dir`. Recording creates `dir/<job>` and empties it of
    /// earlier calls (a recording is one run); replaying requires it to exist.
    pub fn open(mode: TapeMode, dir: &Path, job: &str) -> Result<Self, TapeError> {
        let root = dir.join(file_name(job));
        match mode {
            TapeMode::Record => {
                if root.exists() {
                    std::fs::remove_dir_all(&root).map_err(|source| TapeError::Io {
                        path: root.clone(),
                        source,
                    })?;
                }
                std::fs::create_dir_all(&root).map_err(|source| TapeError::Io {
                    path: root.clone(),
                    source,
                })?;
            }
            TapeMode::Replay if !root.is_dir() => {
                return Err(TapeError::NoRecording {
                    path: root,
                    job: job.to_owned(),
                });
            }
            TapeMode::Replay => {}
        }
        Ok(Self {
            mode,
            root,
            counters: Mutex::new(HashMap::new()),
        })
    }

    /// Record or replay.
    pub fn mode(&self) -> TapeMode {
        self.mode
    }

    /// Starts the loopback server for one run of agent step `step`, whose real endpoint
    /// is `upstream` (an OpenAI-compatible base URL). Point the session at
    /// [`StepTape::base_url`], then call [`StepTape::finish`].
    /// `secrets` are masked in what is written.
    pub async fn open_step(
        &self,
        step: &str,
        upstream: &str,
        secrets: Arc<treadle_session::Secrets>,
    ) -> Result<StepTape, TapeError> {
        let folder = file_name(step);
        let dir = self.root.join(&folder);
        if self.mode == TapeMode::Record {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|source| TapeError::Io {
                    path: dir.clone(),
                    source,
                })?;
        }
        let counter = self.counter(&folder);
        server::start(shared::StepSpec {
            mode: self.mode,
            step: step.to_owned(),
            dir,
            upstream: upstream.trim_end_matches('/').to_owned(),
            counter,
            secrets,
        })
        .await
    }

    /// In replay, the steps whose recorded calls were not all made, as one message
    /// (`Ok` when every call was used, and always when recording).
    pub fn unused(&self) -> Result<(), TapeError> {
        if self.mode == TapeMode::Record {
            return Ok(());
        }
        let entries = std::fs::read_dir(&self.root).map_err(|source| TapeError::Io {
            path: self.root.clone(),
            source,
        })?;
        let mut missed = Vec::new();
        for entry in entries.flatten() {
            // Files beside the step folders (a saved transcript, notes) are not calls.
            if !entry.path().is_dir() {
                continue;
            }
            let Ok(folder) = entry.file_name().into_string() else {
                continue;
            };
            let recorded = recorded_calls(&entry.path());
            let used = self.counter(&folder).load(Ordering::SeqCst);
            if used < recorded {
                missed.push(format!("step `{folder}` made {used} of {recorded}"));
            }
        }
        missed.sort();
        if missed.is_empty() {
            Ok(())
        } else {
            Err(TapeError::Unused(missed.join("; ")))
        }
    }

    fn counter(&self, folder: &str) -> Arc<AtomicU32> {
        // A poisoned lock only means another step panicked; the map itself is still valid.
        let mut map = self
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(folder.to_owned()).or_default().clone()
    }
}

/// How many `NNN.request.json` files a step folder holds.
fn recorded_calls(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let count = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(REQUEST_SUFFIX))
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

const REQUEST_SUFFIX: &str = ".request.json";
const RESPONSE_SUFFIX: &str = ".response.sse";

/// `DIR/<step>/NNN.request.json` for call `n` (from 1).
fn request_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:03}{REQUEST_SUFFIX}"))
}

/// `DIR/<step>/NNN.response.sse` for call `n` (from 1).
fn response_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:03}{RESPONSE_SUFFIX}"))
}

/// A job or step name as one safe path component.
fn file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // `.` and `..` would leave the folder.
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '.') {
        format!("_{cleaned}")
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_single_components() {
        assert_eq!(file_name("helper"), "helper");
        assert_eq!(file_name("a/b c"), "a_b_c");
        assert_eq!(file_name(".."), "_..");
        assert_eq!(file_name(""), "_");
        assert_eq!(
            request_path(Path::new("d"), 7),
            Path::new("d/007.request.json")
        );
    }
}
