//! The watcher's tables in the state file: the build queue, the inputs each job was last
//! queued with, the inputs of each finished build (what `passed:` reads), and each job's
//! run of failures and paused flag.
//!
//! Every change that must not be half done is one redb write transaction: queueing the
//! jobs of a poll and recording the inputs each was queued with (so a crash between "seen" and "queued"
//! cannot happen), and finishing a build (its record, the job's failure count, the queue
//! row's removal).

use std::collections::BTreeMap;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::run::StateError;

/// Queue rows by id (JSON [`Queued`]).
const QUEUE: TableDefinition<u64, &[u8]> = TableDefinition::new("watch_queue");
/// The last queue id given (key `last`): ids are never given twice, though a finished
/// build's row is removed, so "queued `build` (#2)" is never a second #1.
const QUEUE_IDS: TableDefinition<&str, u64> = TableDefinition::new("watch_queue_ids");
/// The inputs each job was last queued with, by (pipeline, job).
const SCHEDULED: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("watch_scheduled");
/// Finished builds by (pipeline, job, run) (JSON [`Build`]).
const BUILDS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("watch_builds");
/// Each job's failures in a row and paused flag, by (pipeline, job).
const JOBS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("watch_jobs");

/// A version of each resource, by resource.
pub type Versions = BTreeMap<String, String>;

/// One queued build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    /// The row's id (queue order).
    #[serde(skip)]
    pub id: u64,
    /// The pipeline file, as served or watched.
    pub pipeline: String,
    /// The job.
    pub job: String,
    /// The versions its gets fetch.
    pub versions: Versions,
    /// A worker has it (a row claimed when the process died is claimed by nobody).
    pub claimed: bool,
    /// The run it began as, once it began: the next start resumes that run.
    pub run: Option<u64>,
}

/// A finished build: what it fetched and published, and whether it was green.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Build {
    /// The versions it fetched and published.
    pub versions: Versions,
    /// Whether the whole job succeeded.
    pub green: bool,
}

/// A job's standing under the watcher.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStanding {
    /// Failed builds in a row.
    pub failures: u32,
    /// Paused by `max_consecutive_failures:` until `treadle jobs resume`.
    pub paused: bool,
}

fn db_err(e: impl Into<redb::Error>) -> StateError {
    StateError::of_redb(e.into())
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(v).map_err(|e| StateError::Format(e.into()))
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StateError> {
    serde_json::from_slice(bytes).map_err(|e| StateError::Format(e.into()))
}

/// Makes the tables, so that readers find them.
pub fn ensure(db: &Database) -> Result<(), StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    txn.open_table(QUEUE).map_err(db_err)?;
    txn.open_table(SCHEDULED).map_err(db_err)?;
    txn.open_table(BUILDS).map_err(db_err)?;
    txn.open_table(JOBS).map_err(db_err)?;
    txn.commit().map_err(db_err)
}

/// Every queue row, oldest first.
pub fn queue(db: &Database) -> Result<Vec<Queued>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(QUEUE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(db_err(e)),
    };
    let mut out = Vec::new();
    for entry in table.iter().map_err(db_err)? {
        let (k, v) = entry.map_err(db_err)?;
        let mut q: Queued = decode(v.value())?;
        q.id = k.value();
        out.push(q);
    }
    Ok(out)
}

/// At start-up: no row is claimed (the workers that had them are gone).
pub fn unclaim_all(db: &Database) -> Result<(), StateError> {
    let rows = queue(db)?;
    let txn = db.begin_write().map_err(db_err)?;
    {
        let mut table = txn.open_table(QUEUE).map_err(db_err)?;
        for mut q in rows.into_iter().filter(|q| q.claimed) {
            q.claimed = false;
            table.insert(q.id, encode(&q)?.as_slice()).map_err(db_err)?;
        }
    }
    txn.commit().map_err(db_err)
}

/// The inputs `job` was last queued with.
pub fn scheduled(db: &Database, pipeline: &str, job: &str) -> Result<Option<Versions>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(SCHEDULED) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(db_err(e)),
    };
    match table.get((pipeline, job)).map_err(db_err)? {
        Some(v) => Ok(Some(decode(v.value())?)),
        None => Ok(None),
    }
}

/// A build to queue: (pipeline, job, the versions its gets fetch).
pub type Enqueue = (String, String, Versions);

/// Queues each build and records its versions as the job's last queued inputs, all in
/// one transaction. A row of the job that no worker has yet takes the new versions
/// instead of a second row being added. The rows' ids, in order.
pub fn enqueue(db: &Database, builds: &[Enqueue]) -> Result<Vec<u64>, StateError> {
    if builds.is_empty() {
        return Ok(Vec::new());
    }
    let rows = queue(db)?;
    let txn = db.begin_write().map_err(db_err)?;
    let mut ids = Vec::new();
    {
        let mut table = txn.open_table(QUEUE).map_err(db_err)?;
        let mut scheduled = txn.open_table(SCHEDULED).map_err(db_err)?;
        let mut counter = txn.open_table(QUEUE_IDS).map_err(db_err)?;
        let given = counter
            .get("last")
            .map_err(db_err)?
            .map_or(0, |v| v.value());
        let in_queue = table.last().map_err(db_err)?.map_or(0, |(k, _)| k.value());
        let mut last = given.max(in_queue);
        for (pipeline, job, versions) in builds {
            let waiting = rows.iter().find(|q| {
                &q.pipeline == pipeline && &q.job == job && !q.claimed && q.run.is_none()
            });
            let row = match waiting {
                Some(q) => Queued {
                    versions: versions.clone(),
                    ..q.clone()
                },
                None => {
                    last += 1;
                    Queued {
                        id: last,
                        pipeline: pipeline.clone(),
                        job: job.clone(),
                        versions: versions.clone(),
                        claimed: false,
                        run: None,
                    }
                }
            };
            table
                .insert(row.id, encode(&row)?.as_slice())
                .map_err(db_err)?;
            scheduled
                .insert(
                    (pipeline.as_str(), job.as_str()),
                    encode(versions)?.as_slice(),
                )
                .map_err(db_err)?;
            ids.push(row.id);
        }
        counter.insert("last", last).map_err(db_err)?;
    }
    txn.commit().map_err(db_err)?;
    Ok(ids)
}

/// Writes a row back (claimed, or given its run).
pub fn put(db: &Database, q: &Queued) -> Result<(), StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    txn.open_table(QUEUE)
        .map_err(db_err)?
        .insert(q.id, encode(q)?.as_slice())
        .map_err(db_err)?;
    txn.commit().map_err(db_err)
}

/// How a finished build counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildCount {
    /// The job succeeded: its versions pass, its failures reset.
    Green,
    /// The job failed or errored: one more failure in a row.
    Red,
    /// Cancelled by a person: neither.
    Cancelled,
}

/// Ends row `q` as build `run`, in one transaction; the job's standing after it.
/// `max_failures`: pause the job once it failed this many times in a row. `published`:
/// the versions its puts published, recorded with what it fetched (a put's version wins
/// over a get's of the same resource), so that `passed:` can take them.
pub fn finish(
    db: &Database,
    q: &Queued,
    run: u64,
    outcome: BuildCount,
    max_failures: Option<u32>,
    published: &Versions,
) -> Result<JobStanding, StateError> {
    let key = (q.pipeline.as_str(), q.job.as_str());
    let txn = db.begin_write().map_err(db_err)?;
    let standing = {
        let mut jobs = txn.open_table(JOBS).map_err(db_err)?;
        let mut standing: JobStanding = match jobs.get(key).map_err(db_err)? {
            Some(v) => decode(v.value())?,
            None => JobStanding::default(),
        };
        match outcome {
            BuildCount::Green => standing.failures = 0,
            BuildCount::Red => {
                standing.failures = standing.failures.saturating_add(1);
                if max_failures.is_some_and(|m| standing.failures >= m) {
                    standing.paused = true;
                }
            }
            BuildCount::Cancelled => {}
        }
        jobs.insert(key, encode(&standing)?.as_slice())
            .map_err(db_err)?;
        if outcome != BuildCount::Cancelled {
            let mut versions = q.versions.clone();
            versions.extend(published.iter().map(|(r, v)| (r.clone(), v.clone())));
            let build = Build {
                versions,
                green: outcome == BuildCount::Green,
            };
            txn.open_table(BUILDS)
                .map_err(db_err)?
                .insert((key.0, key.1, run), encode(&build)?.as_slice())
                .map_err(db_err)?;
        }
        txn.open_table(QUEUE)
            .map_err(db_err)?
            .remove(q.id)
            .map_err(db_err)?;
        standing
    };
    txn.commit().map_err(db_err)?;
    Ok(standing)
}

/// The versions of `job`'s green builds, newest first.
pub fn green_builds(db: &Database, pipeline: &str, job: &str) -> Result<Vec<Versions>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(BUILDS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(db_err(e)),
    };
    let mut out = Vec::new();
    for entry in table
        .range((pipeline, job, 0)..=(pipeline, job, u64::MAX))
        .map_err(db_err)?
    {
        let (_, v) = entry.map_err(db_err)?;
        let b: Build = decode(v.value())?;
        if b.green {
            out.push(b.versions);
        }
    }
    out.reverse();
    Ok(out)
}

/// Each job's standing, by (pipeline, job).
pub fn standings(db: &Database) -> Result<BTreeMap<(String, String), JobStanding>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(JOBS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(db_err(e)),
    };
    let mut out = BTreeMap::new();
    for entry in table.iter().map_err(db_err)? {
        let (k, v) = entry.map_err(db_err)?;
        let (p, j) = k.value();
        out.insert((p.to_owned(), j.to_owned()), decode(v.value())?);
    }
    Ok(out)
}

/// Un-pauses `job` (its failure count starts again from zero); whether it was paused.
pub fn resume_job(db: &Database, pipeline: &str, job: &str) -> Result<bool, StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    let was = {
        let mut jobs = txn.open_table(JOBS).map_err(db_err)?;
        let standing: JobStanding = match jobs.get((pipeline, job)).map_err(db_err)? {
            Some(v) => decode(v.value())?,
            None => JobStanding::default(),
        };
        jobs.insert((pipeline, job), encode(&JobStanding::default())?.as_slice())
            .map_err(db_err)?;
        standing.paused
    };
    txn.commit().map_err(db_err)?;
    Ok(was)
}
