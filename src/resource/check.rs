//! Checking a resource for versions, for anything that watches: [`Checker::check`] runs
//! the resource's check (whatever its type), records what it reported in the version
//! history ([`super::history`]) and returns what was new; [`Checker::next_version`] is
//! the version a job's get takes.
//!
//! ```no_run
//! # async fn watch(loaded: &treadle::pipeline::Loaded, store: &treadle::run::state::Store)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use treadle::pipeline::VersionSpec;
//! use treadle::resource::check::Checker;
//!
//! let checker = Checker::new(loaded, store.database(), std::env::temp_dir())?;
//! let new = checker.check("repo").await?; // recorded, oldest first
//! if !new.is_empty() {
//!     let version = checker.next_version("build", "repo", &VersionSpec::Every)?;
//! }
//! # Ok(()) }
//! ```
//!
//! A check sees the newest recorded version as `{{ .version }}` (its cursor); a check made
//! by `treadle run` ([`Checker::check_without_cursor`]) sees an empty map, as `steps`
//! does: a manual run asks what exists, not what is new.

use std::path::PathBuf;
use std::sync::Arc;

use redb::Database;
use tokio_util::sync::CancellationToken;

use super::history::{History, HistoryError};
use super::scripted::ScriptedError;
use super::{ResourceError, git};
use crate::pipeline::{Defaults, Loaded, ResolvedResource, TypedResource, Version, VersionSpec};

/// Why a check failed; each names the resource.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The resource cannot be used (unknown, bad `source:`, unknown type).
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// The type's `check` script failed or printed no list of versions.
    #[error(transparent)]
    Scripted(#[from] ScriptedError),
    /// The history could not be read or written.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// A scratch directory for the check could not be made.
    #[error("resource `{resource}`: cannot make a directory for its check at {path}: {source}")]
    Scratch {
        /// The resource.
        resource: String,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Checks the resources of one pipeline against one state file's version history.
#[derive(Clone)]
pub struct Checker {
    loaded: Arc<Loaded>,
    history: History,
    scratch: PathBuf,
    cap: u32,
}

impl Checker {
    /// A checker of `loaded`'s resources recording into `db` (the state file's database,
    /// [`crate::run::state::Store::database`]); checks run in directories made under
    /// `scratch` (one per check running at once, emptied after each check).
    pub fn new(loaded: &Loaded, db: Arc<Database>, scratch: PathBuf) -> Result<Self, CheckError> {
        Ok(Self {
            cap: Defaults::version_history(loaded.pipeline.defaults.as_ref()),
            loaded: Arc::new(loaded.clone()),
            history: History::open(db)?,
            scratch,
        })
    }

    /// The version history it records into.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Checks `resource` with its cursor, records what it reported; the new versions,
    /// oldest first. The first check of a resource with no history is a cold start: every
    /// version but the newest counts as already taken by `every` gets.
    pub async fn check(&self, resource: &str) -> Result<Vec<Version>, CheckError> {
        // A name from outside (a watcher's list, a webhook's path): looked up here.
        let typed = super::typed(&self.loaded, resource)?;
        self.check_with(typed, true, &CancellationToken::new())
            .await
    }

    /// Checks `resource` (a get step's, resolved at load) with an empty cursor (a manual
    /// run), records what it reported; the new versions, oldest first.
    pub async fn check_without_cursor(
        &self,
        resource: &TypedResource,
        cancel: &CancellationToken,
    ) -> Result<Vec<Version>, CheckError> {
        self.check_with(resource, false, cancel).await
    }

    async fn check_with(
        &self,
        typed: &TypedResource,
        cursor: bool,
        cancel: &CancellationToken,
    ) -> Result<Vec<Version>, CheckError> {
        let found = self.find_with(typed, cursor, cancel).await?;
        let history = self.history.clone();
        let (name, cap) = (typed.name().to_owned(), self.cap);
        crate::blocking::blocking(move || history.record(&name, &found, cap, cursor))
            .await
            .map_err(CheckError::from)
    }

    /// Runs the check of `resource` with its cursor and returns what it reported, oldest
    /// first, recording nothing: a watcher checks many resources at once and records the
    /// round's findings together ([`Checker::record_round`]).
    pub async fn find(
        &self,
        resource: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<Version>, CheckError> {
        let typed = super::typed(&self.loaded, resource)?;
        self.find_with(typed, true, cancel).await
    }

    /// Records what the checks of a round found ([`Checker::find`]), as
    /// [`Checker::check`] would have one by one, in one write transaction; then the newest
    /// recorded version of each, in the order given.
    pub async fn record_round(
        &self,
        found: Vec<(String, Vec<Version>)>,
    ) -> Result<Vec<Option<Version>>, CheckError> {
        let (history, cap) = (self.history.clone(), self.cap);
        crate::blocking::blocking(move || {
            let checks: Vec<(&str, &[Version])> = found
                .iter()
                .map(|(r, v)| (r.as_str(), v.as_slice()))
                .collect();
            history.record_all(&checks, cap, true)?;
            let names: Vec<&str> = checks.iter().map(|(r, _)| *r).collect();
            history.latest_of(&names)
        })
        .await
        .map_err(CheckError::from)
    }

    async fn find_with(
        &self,
        typed: &TypedResource,
        cursor: bool,
        cancel: &CancellationToken,
    ) -> Result<Vec<Version>, CheckError> {
        let resource = typed.name();
        Ok(match &typed.kind {
            ResolvedResource::Git(src) => {
                let src = src.clone();
                let commit =
                    tokio::task::spawn_blocking(move || git::resolve(&src.uri, &src.branch))
                        .await
                        .map_err(|e| git::GitError::Failed {
                            what: "ls-remote",
                            detail: e.to_string(),
                        })
                        .and_then(|r| r)
                        .map_err(ResourceError::from)?;
                vec![Version::from([("ref".to_owned(), commit)])]
            }
            ResolvedResource::Time(time) => {
                let last = self.history.latest(resource)?;
                time.check(last.as_ref(), std::time::SystemTime::now())
            }
            ResolvedResource::Unavailable => {
                return Err(ResourceError::unavailable(typed).into());
            }
            ResolvedResource::Scripted(kind) => {
                let s = super::scripted::Scripted {
                    resource: &typed.spec,
                    kind,
                };
                let last = if cursor {
                    self.history.latest(resource)?
                } else {
                    None
                };
                // A few directories per process, each lent to one check at a time and
                // emptied after it rather than made and removed: a watcher checks every
                // resource every poll, and making (and removing) a directory per check
                // was a large part of its time in the kernel (ext4's inode allocation
                // after many removals). A check keeps nothing between polls.
                let slot = Slot::take(&self.scratch);
                std::fs::create_dir_all(&slot.0).map_err(|source| CheckError::Scratch {
                    resource: resource.to_owned(),
                    path: slot.0.clone(),
                    source,
                })?;
                let found = s.check(last.as_ref(), &slot.0, cancel).await;
                // Best effort: scratch left behind only costs disk.
                empty(&slot.0);
                drop(slot);
                found?
            }
        })
    }

    /// The version a get of `resource` in `job` fetches under `mode` (see
    /// [`History::next_version`]: under `every` it is taken). `None`: no version.
    pub fn next_version(
        &self,
        job: &str,
        resource: &str,
        mode: &VersionSpec,
    ) -> Result<Option<Version>, CheckError> {
        Ok(self.history.next_version(job, resource, mode)?)
    }
}

/// Removes what a check left in its directory (and in its `.tmp`), keeping both: a check
/// keeps nothing between polls.
fn empty(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && e.file_name() == crate::confine::TMP {
            empty(&path);
        } else if is_dir {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// A check directory under a scratch directory, lent to one check at a time: as many
/// exist as checks ever ran at once.
struct Slot(PathBuf);

static IN_USE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

impl Slot {
    fn take(scratch: &std::path::Path) -> Self {
        let mut used = IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = (0..=used.len())
            .map(|n| scratch.join(format!("check-{}-{n}", std::process::id())))
            .find(|d| !used.contains(d))
            .unwrap_or_else(|| scratch.join(format!("check-{}", std::process::id())));
        used.push(dir.clone());
        Self(dir)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut used = IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = used.iter().position(|d| d == &self.0) {
            used.swap_remove(i);
        }
    }
}
