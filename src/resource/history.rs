//! Version history: every version a check of a resource reported, in the order they were
//! first seen, kept in the state file (redb) beside the runs, and the per-(job, resource)
//! cursors of `version: every`.
//!
//! Tables (keys are resource and job names):
//!
//! * `resource_versions.v1`: `(resource, n)` → the version, `n` counting up from 0 per
//!   resource in discovery order; pruning the oldest never renumbers the rest;
//! * `resource_version_ids.v1`: `(resource, version as canonical JSON)` → `n`, so a
//!   version seen again is not recorded twice;
//! * `resource_floors.v1`: `resource` → the first `n` an `every` cursor may take. A
//!   watcher's first check of a resource (empty history) sets it to its newest version, so
//!   a cold start builds that one and not the whole backlog (a check made by `treadle run`
//!   sets none: a manual run takes everything recorded);
//! * `every_cursors.v1`: `(job, resource)` → the next `n` that job may take.
//!
//! A version is *taken* by `version: every` when [`History::next_version`] hands it out
//! (when its build starts): a build that then fails does not take it again.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::pipeline::{Version, VersionSpec};

pub(super) const VERSIONS: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("resource_versions.v1");
pub(super) const VERSION_IDS: TableDefinition<(&str, &str), u64> =
    TableDefinition::new("resource_version_ids.v1");
const FLOORS: TableDefinition<&str, u64> = TableDefinition::new("resource_floors.v1");
const CURSORS: TableDefinition<(&str, &str), u64> = TableDefinition::new("every_cursors.v1");

/// Format byte of every version written by this version of treadle.
const FORMAT_JSON_V1: u8 = 1;

/// Errors of the version history.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A read or write of the state file failed: redb's error, kept whole (a caller can
    /// tell a full disk, `redb::Error::Io`, from a corrupt file).
    #[error("state file error (version history): {0}")]
    Db(#[source] redb::Error),
    /// The blocking task reading or writing the history stopped before it finished.
    #[error("state file error (version history): {0}")]
    Stopped(#[from] crate::blocking::WorkerStopped),
    /// A recorded version is in a format this treadle cannot read.
    #[error("a recorded version of `{resource}` is unreadable: {detail}")]
    Format {
        /// The resource.
        resource: String,
        /// What is wrong.
        detail: String,
    },
    /// A pinned version was never reported by the resource's check.
    #[error(
        "resource `{resource}` has no version {version} (its check never reported it; the versions known are listed by its check)"
    )]
    NotRecorded {
        /// The resource.
        resource: String,
        /// The version, as JSON.
        version: String,
    },
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for HistoryError {
            fn from(e: $t) -> Self { HistoryError::Db(e.into()) }
        }
    )*};
}
db_err!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// A version as canonical JSON (keys sorted): its identity in the tables and in step keys.
pub fn canonical(version: &Version) -> String {
    serde_json::to_string(version).unwrap_or_default()
}

/// The version history of a state file.
#[derive(Clone)]
pub struct History {
    db: Arc<Database>,
}

impl History {
    /// Opens the history's tables in `db` (the state file's database), creating them.
    pub fn open(db: Arc<Database>) -> Result<Self, HistoryError> {
        let mut txn = db.begin_write()?;
        // Creating tables need not be synced: the first durable write persists them.
        let _ = txn.set_durability(redb::Durability::None);
        txn.open_table(VERSIONS)?;
        txn.open_table(VERSION_IDS)?;
        txn.open_table(FLOORS)?;
        txn.open_table(CURSORS)?;
        txn.commit()?;
        Ok(Self { db })
    }

    /// Records what a check of `resource` reported (oldest first), keeping at most `cap`
    /// versions (`0`: all), newest kept. Returns the versions not seen before, in order.
    /// With `cold_start` (a watcher's check), a first record into an empty history marks
    /// every version but the newest as taken for every job's `every` cursor.
    pub fn record(
        &self,
        resource: &str,
        found: &[Version],
        cap: u32,
        cold_start: bool,
    ) -> Result<Vec<Version>, HistoryError> {
        let mut new = self.record_all(&[(resource, found)], cap, cold_start)?;
        Ok(new.pop().unwrap_or_default())
    }

    /// [`History::record`] for the checks of many resources at once (a watcher's poll
    /// round), in one write transaction: one sync to disk for the round, not one per
    /// resource. The new versions of each, in the order given.
    pub fn record_all(
        &self,
        checks: &[(&str, &[Version])],
        cap: u32,
        cold_start: bool,
    ) -> Result<Vec<Vec<Version>>, HistoryError> {
        // A watcher checks every resource on every poll and mostly hears what it knows:
        // that costs a read, not a write transaction (and its sync to disk).
        let moved = self.any_new(checks)?;
        let mut new = vec![Vec::new(); checks.len()];
        if !moved.iter().any(|m| *m) {
            return Ok(new);
        }
        let txn = self.db.begin_write()?;
        {
            let mut versions = txn.open_table(VERSIONS)?;
            let mut ids = txn.open_table(VERSION_IDS)?;
            let mut floors = txn.open_table(FLOORS)?;
            let todo = checks.iter().zip(&mut new).zip(&moved).filter(|(_, m)| **m);
            for (((resource, found), new), _) in todo {
                let cold = cold_start && next_number(&versions, resource)? == 0;
                for v in *found {
                    if add(&mut versions, &mut ids, resource, v)? {
                        new.push(v.clone());
                    }
                }
                let next = next_number(&versions, resource)?;
                if cold && next > 0 {
                    floors.insert(*resource, next - 1)?;
                }
                if cap > 0 {
                    prune(&mut versions, &mut ids, resource, u64::from(cap))?;
                }
            }
        }
        txn.commit()?;
        Ok(new)
    }

    /// The state file's database.
    pub(super) fn db(&self) -> &Database {
        &self.db
    }

    /// For each check, whether it reported a version not recorded yet (only those are
    /// written).
    fn any_new(&self, checks: &[(&str, &[Version])]) -> Result<Vec<bool>, HistoryError> {
        let txn = self.db.begin_read()?;
        let ids = txn.open_table(VERSION_IDS)?;
        let mut out = Vec::with_capacity(checks.len());
        for (resource, found) in checks {
            let mut new = false;
            for v in *found {
                if ids.get((*resource, canonical(v).as_str()))?.is_none() {
                    new = true;
                    break;
                }
            }
            out.push(new);
        }
        Ok(out)
    }

    /// Every recorded version of `resource`, oldest first, with its number.
    pub fn versions(&self, resource: &str) -> Result<Vec<(u64, Version)>, HistoryError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(VERSIONS)?;
        let mut out = Vec::new();
        for e in t.range((resource, 0)..=(resource, u64::MAX))? {
            let (k, v) = e?;
            out.push((k.value().1, decode(resource, v.value())?));
        }
        Ok(out)
    }

    /// The newest recorded version of `resource`: the cursor its check is given.
    pub fn latest(&self, resource: &str) -> Result<Option<Version>, HistoryError> {
        let mut all = self.latest_of(&[resource])?;
        Ok(all.pop().flatten())
    }

    /// [`History::latest`] of each of `resources`, read in one transaction.
    pub fn latest_of(&self, resources: &[&str]) -> Result<Vec<Option<Version>>, HistoryError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(VERSIONS)?;
        let mut out = Vec::with_capacity(resources.len());
        for resource in resources {
            let last = t
                .range((*resource, 0)..=(*resource, u64::MAX))?
                .next_back()
                .transpose()?;
            out.push(last.map(|(_, v)| decode(resource, v.value())).transpose()?);
        }
        Ok(out)
    }

    /// The version a get of `resource` in `job` fetches under `mode`; `None` when there is
    /// none (no version recorded, or under `every` none left to take). Under `every` the
    /// version returned is taken: the job's cursor moves past it, durably.
    pub fn next_version(
        &self,
        job: &str,
        resource: &str,
        mode: &VersionSpec,
    ) -> Result<Option<Version>, HistoryError> {
        match mode {
            VersionSpec::Latest => self.latest(resource),
            VersionSpec::Pinned(v) => {
                let txn = self.db.begin_read()?;
                let known = txn
                    .open_table(VERSION_IDS)?
                    .get((resource, canonical(v).as_str()))?
                    .is_some();
                if known {
                    Ok(Some(v.clone()))
                } else {
                    Err(HistoryError::NotRecorded {
                        resource: resource.to_owned(),
                        version: canonical(v),
                    })
                }
            }
            VersionSpec::Every => self.take_next(job, resource),
        }
    }

    fn take_next(&self, job: &str, resource: &str) -> Result<Option<Version>, HistoryError> {
        let txn = self.db.begin_write()?;
        let taken = {
            let floor = txn
                .open_table(FLOORS)?
                .get(resource)?
                .map_or(0, |v| v.value());
            let mut cursors = txn.open_table(CURSORS)?;
            let from = cursors
                .get((job, resource))?
                .map_or(floor, |v| v.value())
                .max(floor);
            let versions = txn.open_table(VERSIONS)?;
            let first = versions
                .range((resource, from)..=(resource, u64::MAX))?
                .next()
                .transpose()?;
            match first {
                Some((k, v)) => {
                    let n = k.value().1;
                    let version = decode(resource, v.value())?;
                    cursors.insert((job, resource), n + 1)?;
                    Some(version)
                }
                None => None,
            }
        };
        txn.commit()?;
        Ok(taken)
    }

    /// Forgets which versions of `resource` `job` took under `every`, so that its next
    /// takes start again from the oldest version still recorded (`treadle run --force`:
    /// versions already taken run again, and are taken again as they run).
    pub fn rewind(&self, job: &str, resource: &str) -> Result<(), HistoryError> {
        let txn = self.db.begin_write()?;
        txn.open_table(CURSORS)?.remove((job, resource))?;
        txn.commit()?;
        Ok(())
    }

    /// The newest version `job` has taken of `resource` under `every` (still recorded):
    /// what a get whose versions ran out holds at.
    pub fn last_taken(&self, job: &str, resource: &str) -> Result<Option<Version>, HistoryError> {
        let txn = self.db.begin_read()?;
        let Some(cursor) = txn
            .open_table(CURSORS)?
            .get((job, resource))?
            .map(|v| v.value())
        else {
            return Ok(None);
        };
        let t = txn.open_table(VERSIONS)?;
        let last = t
            .range((resource, 0)..(resource, cursor))?
            .next_back()
            .transpose()?;
        last.map(|(_, v)| decode(resource, v.value())).transpose()
    }

    /// How many versions `job` has still to take of `resource` under `every`.
    pub fn untaken(&self, job: &str, resource: &str) -> Result<u64, HistoryError> {
        let txn = self.db.begin_read()?;
        let floor = txn
            .open_table(FLOORS)?
            .get(resource)?
            .map_or(0, |v| v.value());
        let from = txn
            .open_table(CURSORS)?
            .get((job, resource))?
            .map_or(floor, |v| v.value())
            .max(floor);
        let t = txn.open_table(VERSIONS)?;
        let mut n = 0;
        for e in t.range((resource, from)..=(resource, u64::MAX))? {
            e?;
            n += 1;
        }
        Ok(n)
    }
}

/// The number the next version of `resource` gets.
fn next_number(
    versions: &redb::Table<'_, (&'static str, u64), &'static [u8]>,
    resource: &str,
) -> Result<u64, HistoryError> {
    Ok(versions
        .range((resource, 0)..=(resource, u64::MAX))?
        .next_back()
        .transpose()?
        .map_or(0, |(k, _)| k.value().1 + 1))
}

/// Records `v` as the newest version of `resource` unless it is recorded already;
/// whether it was added.
pub(super) fn add(
    versions: &mut redb::Table<'_, (&'static str, u64), &'static [u8]>,
    ids: &mut redb::Table<'_, (&'static str, &'static str), u64>,
    resource: &str,
    v: &Version,
) -> Result<bool, HistoryError> {
    let key = canonical(v);
    if ids.get((resource, key.as_str()))?.is_some() {
        return Ok(false);
    }
    let next = next_number(versions, resource)?;
    let mut bytes = vec![FORMAT_JSON_V1];
    bytes.extend_from_slice(key.as_bytes());
    versions.insert((resource, next), bytes.as_slice())?;
    ids.insert((resource, key.as_str()), next)?;
    Ok(true)
}

pub(super) fn prune(
    versions: &mut redb::Table<'_, (&'static str, u64), &'static [u8]>,
    ids: &mut redb::Table<'_, (&'static str, &'static str), u64>,
    resource: &str,
    cap: u64,
) -> Result<(), HistoryError> {
    let mut all = Vec::new();
    for e in versions.range((resource, 0)..=(resource, u64::MAX))? {
        let (k, v) = e?;
        all.push((k.value().1, v.value().to_vec()));
    }
    let excess = all
        .len()
        .saturating_sub(usize::try_from(cap).unwrap_or(usize::MAX));
    for (n, bytes) in all.into_iter().take(excess) {
        versions.remove((resource, n))?;
        let key = String::from_utf8_lossy(bytes.get(1..).unwrap_or_default()).into_owned();
        ids.remove((resource, key.as_str()))?;
    }
    Ok(())
}

pub(super) fn decode(resource: &str, bytes: &[u8]) -> Result<Version, HistoryError> {
    let err = |detail: String| HistoryError::Format {
        resource: resource.to_owned(),
        detail,
    };
    match bytes.split_first() {
        Some((&FORMAT_JSON_V1, json)) => {
            serde_json::from_slice(json).map_err(|e| err(e.to_string()))
        }
        Some((b, _)) => Err(err(format!("format byte {b}"))),
        None => Err(err("empty value".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: &str) -> Version {
        Version::from([("n".to_owned(), n.to_owned())])
    }

    fn open(dir: &std::path::Path) -> History {
        let db = Database::create(dir.join("state.redb")).unwrap();
        History::open(Arc::new(db)).unwrap()
    }

    #[test]
    fn versions_are_kept_once_in_discovery_order() {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        assert_eq!(
            h.record("r", &[v("1"), v("2")], 0, false).unwrap(),
            [v("1"), v("2")]
        );
        assert_eq!(
            h.record("r", &[v("2"), v("3")], 0, false).unwrap(),
            [v("3")]
        );
        assert_eq!(
            h.record("r", &[v("1")], 0, false).unwrap(),
            Vec::<Version>::new()
        );
        let all: Vec<Version> = h.versions("r").unwrap().into_iter().map(|x| x.1).collect();
        assert_eq!(all, [v("1"), v("2"), v("3")]);
        assert_eq!(h.latest("r").unwrap(), Some(v("3")));
        assert_eq!(h.latest("other").unwrap(), None);
    }

    #[test]
    fn the_cap_keeps_the_newest_and_a_pruned_version_can_come_back_as_new() {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        h.record("r", &[v("1"), v("2"), v("3"), v("4")], 2, false)
            .unwrap();
        let all: Vec<u64> = h.versions("r").unwrap().into_iter().map(|x| x.0).collect();
        assert_eq!(all, [2, 3]);
        assert_eq!(h.record("r", &[v("1")], 2, false).unwrap(), [v("1")]);
        assert_eq!(h.latest("r").unwrap(), Some(v("1")));
    }

    #[test]
    fn every_takes_each_version_once_per_job_and_a_cold_start_only_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        {
            let h = open(dir.path());
            h.record("r", &[v("1"), v("2")], 0, true).unwrap();
            assert_eq!(h.last_taken("a", "r").unwrap(), None);
            assert_eq!(
                h.next_version("a", "r", &VersionSpec::Every).unwrap(),
                Some(v("2"))
            );
            assert_eq!(h.last_taken("a", "r").unwrap(), Some(v("2")));
            assert_eq!(h.next_version("a", "r", &VersionSpec::Every).unwrap(), None);
            h.record("r", &[v("3"), v("4")], 0, true).unwrap();
            assert_eq!(
                h.next_version("a", "r", &VersionSpec::Every).unwrap(),
                Some(v("3"))
            );
            assert_eq!(h.untaken("a", "r").unwrap(), 1);
            assert_eq!(
                h.untaken("b", "r").unwrap(),
                3,
                "another job keeps its own place"
            );
        }
        // Reopened (a restart): the cursor held.
        let h = open(dir.path());
        assert_eq!(
            h.next_version("a", "r", &VersionSpec::Every).unwrap(),
            Some(v("4"))
        );
        assert_eq!(h.next_version("a", "r", &VersionSpec::Every).unwrap(), None);
        assert_eq!(
            h.next_version("b", "r", &VersionSpec::Every).unwrap(),
            Some(v("2"))
        );
    }

    #[test]
    fn a_round_of_checks_is_recorded_together_as_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        h.record("known", &[v("1")], 0, true).unwrap();
        let (a, known, none) = (
            [v("1"), v("2"), v("3")],
            [v("1"), v("2")],
            Vec::<Version>::new(),
        );
        let new = h
            .record_all(&[("a", &a), ("known", &known), ("none", &none)], 2, true)
            .unwrap();
        assert_eq!(new, [a.to_vec(), vec![v("2")], vec![]]);
        // Each resource got its own cold start (only "a" was fresh), and the cap held.
        assert_eq!(
            h.next_version("j", "a", &VersionSpec::Every).unwrap(),
            Some(v("3"))
        );
        assert_eq!(h.untaken("j", "known").unwrap(), 2);
        let kept: Vec<Version> = h.versions("a").unwrap().into_iter().map(|x| x.1).collect();
        assert_eq!(kept, [v("2"), v("3")]);
        assert_eq!(
            h.latest_of(&["a", "known", "none"]).unwrap(),
            [Some(v("3")), Some(v("2")), None]
        );
        // Nothing new: nothing written, nothing reported.
        let again = h.record_all(&[("a", &a[1..]), ("known", &known)], 2, true);
        assert_eq!(again.unwrap(), [Vec::<Version>::new(), vec![]]);
    }

    #[test]
    fn without_a_cold_start_every_takes_the_whole_history() {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        h.record("r", &[v("1"), v("2")], 0, false).unwrap();
        assert_eq!(
            h.next_version("a", "r", &VersionSpec::Every).unwrap(),
            Some(v("1"))
        );
        assert_eq!(
            h.next_version("a", "r", &VersionSpec::Every).unwrap(),
            Some(v("2"))
        );
        assert_eq!(h.next_version("a", "r", &VersionSpec::Every).unwrap(), None);
    }

    #[test]
    fn latest_and_pinned_read_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        h.record("r", &[v("87"), v("88")], 0, false).unwrap();
        assert_eq!(
            h.next_version("j", "r", &VersionSpec::Latest).unwrap(),
            Some(v("88"))
        );
        let pinned = VersionSpec::Pinned(v("87"));
        assert_eq!(h.next_version("j", "r", &pinned).unwrap(), Some(v("87")));
        let missing = VersionSpec::Pinned(v("99"));
        let e = h.next_version("j", "r", &missing).unwrap_err();
        assert!(e.to_string().contains("`r`"), "{e}");
    }
}
