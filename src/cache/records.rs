//! The cache's tables in the state file (`.treadle/state.redb`, shared with runs, steps
//! and the agent journal):
//!
//! * `cache_entries`: step key → the [`SuccessRecord`] a replay restores (replayable steps only);
//! * `step_results`: (run, seq) → the [`SuccessRecord`] of each step that succeeded in a run,
//!   replayable or not, which `--resume` and `--replay` read;
//! * `cache_last`: (job, step path) → the [`KeyParts`] of its last success, which
//!   `treadle plan` compares with;
//! * `run_links`: run → the run it resumed or replayed.
//!
//! Values are a format byte then JSON, like every table of the state file.

use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::digest::{Digest, Manifest};
use super::key::KeyParts;

const ENTRIES: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("cache_entries");
const RESULTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("step_results");
const LAST: TableDefinition<&str, &[u8]> = TableDefinition::new("cache_last");
const LINKS: TableDefinition<u64, &[u8]> = TableDefinition::new("run_links");

/// Errors reading or writing the cache's tables.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// redb failed: its error, kept whole.
    #[error("state file error: {0}")]
    Db(#[source] redb::Error),
    /// The blocking task reading or writing the tables stopped before it finished.
    #[error("state file error: {0}")]
    Stopped(#[from] crate::blocking::WorkerStopped),
    /// A value this version cannot read.
    #[error("a cache record is in an unknown format ({0})")]
    Format(#[from] crate::stored_json::FormatError),
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for RecordError {
            fn from(e: $t) -> Self { RecordError::Db(e.into()) }
        }
    )*};
}
db_err!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, RecordError> {
    Ok(crate::stored_json::encode(v)?)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    Ok(crate::stored_json::decode(bytes)?)
}

/// One output artifact of a step, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutputTree {
    /// Artifact name.
    pub name: String,
    /// Tree digest.
    pub digest: Digest,
    /// Its files.
    pub manifest: Manifest,
}

/// A command's stdout and stderr kept apart: the last
/// [`crate::run::task::STREAM_END_BYTES`] of each, secrets masked (in a step's record
/// and in its [`SuccessRecord`], so a replay gives back what the run gave).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streams {
    /// The end of its stdout.
    pub stdout: String,
    /// The end of its stderr.
    pub stderr: String,
    /// Whether a stream was longer, so only its end is here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// What a step produced, kept alike by its run's record ([`crate::run::StepRecord`]) and,
/// once it succeeded, by the cache's ([`SuccessRecord`]), so that a replay gives back what
/// the run gave. Each holds it with `#[serde(flatten)]`: its keys stay at the top of either
/// record's JSON, as they were before it was one struct.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Produced {
    /// A task's exit code (the last attempt's).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The end of its output (stdout and stderr, secrets masked).
    #[serde(default)]
    pub stdout_tail: String,
    /// A task's stdout and stderr apart, the end of each (secrets masked): what a
    /// workflow's shell step gives back. `None` for other kinds, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<Streams>,
    /// An agent's verdict.
    #[serde(default)]
    pub verdict: Option<String>,
    /// The reason an agent gave with its verdict (what `context: { from }` hands on, from
    /// a replayed step as from the step run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// An agent's token usage and cost, as the agent step reports it.
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
}

/// What a succeeded step left: enough to replay it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuccessRecord {
    /// The step key.
    pub key: Digest,
    /// What the key was made of.
    pub parts: KeyParts,
    /// The run and step that produced it.
    pub run: u64,
    /// Its place in that run's outline.
    pub seq: u32,
    /// Output artifacts.
    pub outputs: Vec<OutputTree>,
    /// Its exit code, output, verdict and usage, as its run's record has them.
    #[serde(flatten)]
    pub produced: Produced,
    /// An agent's recorded events (tool calls, text).
    #[serde(default)]
    pub events: Vec<serde_json::Value>,
    /// A `get`'s version.
    #[serde(default)]
    pub version: Option<String>,
    /// An agent step's commits on its git inputs (`commit:`): artifact → commit, brought
    /// back on the replaying run's branch.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub commits: std::collections::BTreeMap<String, String>,
    /// Last time it was stored or replayed (ms since the epoch), for LRU eviction.
    #[serde(default)]
    pub last_used_ms: u64,
}

/// How a run came from another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunLink {
    /// `resume`, `replay` or `fork`; or how a run started that came from no earlier run
    /// but whose resume must know it: `force`, `rerun`.
    pub how: String,
    /// The earlier run (0 for `force` and `rerun`).
    pub of: u64,
    /// For a replay or fork: the step re-run from; for `rerun`, the step rerun.
    #[serde(default)]
    pub from: Option<String>,
}

impl RunLink {
    /// The link of a run started `how` (`force`, `rerun` of `from`), from no earlier run.
    pub fn started(how: &str, from: Option<String>) -> Self {
        Self {
            how: how.to_owned(),
            of: 0,
            from,
        }
    }
}

/// The cache's tables.
#[derive(Clone)]
pub struct Records {
    db: Arc<Database>,
}

fn last_key(job: &str, path: &str) -> String {
    format!("{job}\u{0}{path}")
}

impl Records {
    /// Opens the tables in `db`, creating them.
    pub fn open(db: Arc<Database>) -> Result<Self, RecordError> {
        let txn = db.begin_write()?;
        txn.open_table(ENTRIES)?;
        txn.open_table(RESULTS)?;
        txn.open_table(LAST)?;
        txn.open_table(LINKS)?;
        txn.commit()?;
        Ok(Self { db })
    }

    /// The replayable outcome stored under a key.
    pub fn entry(&self, key: &Digest) -> Result<Option<SuccessRecord>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = match txn.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        t.get(&key.0)?.map(|v| decode(v.value())).transpose()
    }

    /// The outcome of step `seq` in `run`, if it succeeded there.
    pub fn result(&self, run: u64, seq: u32) -> Result<Option<SuccessRecord>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(RESULTS)?;
        t.get((run, seq))?.map(|v| decode(v.value())).transpose()
    }

    /// The parts of a step's last success.
    pub fn last(&self, job: &str, path: &str) -> Result<Option<KeyParts>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = match txn.open_table(LAST) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        t.get(last_key(job, path).as_str())?
            .map(|v| decode(v.value()))
            .transpose()
    }

    /// Records a step's success: its result in the run, its parts for `plan`, and (when
    /// `replayable`) its cache entry. `durable: false` for a replay, whose record can be
    /// rebuilt: it then costs no fsync of its own.
    pub fn put_success(
        &self,
        job: &str,
        path: &str,
        outcome: &SuccessRecord,
        replayable: bool,
        durable: bool,
    ) -> Result<(), RecordError> {
        let mut txn = self.db.begin_write()?;
        if !durable {
            txn.set_durability(Durability::None)?;
        }
        self.put_success_in(&txn, job, path, outcome, replayable)?;
        txn.commit()?;
        Ok(())
    }

    /// [`Records::put_success`] inside the caller's transaction `txn` (which the caller
    /// commits): a replayed step's success goes in the same commit as the run's record of
    /// it, one commit instead of two.
    pub fn put_success_in(
        &self,
        txn: &redb::WriteTransaction,
        job: &str,
        path: &str,
        outcome: &SuccessRecord,
        replayable: bool,
    ) -> Result<(), RecordError> {
        let bytes = encode(outcome)?;
        txn.open_table(RESULTS)?
            .insert((outcome.run, outcome.seq), bytes.as_slice())?;
        if replayable {
            txn.open_table(ENTRIES)?
                .insert(&outcome.key.0, bytes.as_slice())?;
        }
        txn.open_table(LAST)?.insert(
            last_key(job, path).as_str(),
            encode(&outcome.parts)?.as_slice(),
        )?;
        Ok(())
    }

    /// Forgets a cache entry (its objects were corrupt).
    pub fn forget(&self, key: &Digest) -> Result<(), RecordError> {
        let txn = self.db.begin_write()?;
        txn.open_table(ENTRIES)?.remove(&key.0)?;
        txn.commit()?;
        Ok(())
    }

    /// Marks entries as just used, in one transaction.
    pub fn touch(&self, keys: &[Digest], now_ms: u64) -> Result<(), RecordError> {
        if keys.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(ENTRIES)?;
            for k in keys {
                let Some(mut o): Option<SuccessRecord> =
                    t.get(&k.0)?.map(|v| decode(v.value())).transpose()?
                else {
                    continue;
                };
                o.last_used_ms = now_ms;
                t.insert(&k.0, encode(&o)?.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Every cache entry, least recently used first.
    pub fn entries_by_age(&self) -> Result<Vec<SuccessRecord>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(ENTRIES)?;
        let mut out: Vec<SuccessRecord> = Vec::new();
        for e in t.iter()? {
            out.push(decode(e?.1.value())?);
        }
        out.sort_by_key(|o| o.last_used_ms);
        Ok(out)
    }

    /// Every step result of every run (their objects are kept while the cache holds them).
    pub fn results(&self) -> Result<Vec<SuccessRecord>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(RESULTS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            out.push(decode(e?.1.value())?);
        }
        Ok(out)
    }

    /// Removes cache entries.
    pub fn remove(&self, keys: &[Digest]) -> Result<(), RecordError> {
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(ENTRIES)?;
            for k in keys {
                t.remove(&k.0)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Records where a run came from.
    pub fn link(&self, run: u64, link: &RunLink) -> Result<(), RecordError> {
        let txn = self.db.begin_write()?;
        txn.open_table(LINKS)?
            .insert(run, encode(link)?.as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Where a run came from.
    pub fn link_of(&self, run: u64) -> Result<Option<RunLink>, RecordError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(LINKS)?;
        t.get(run)?.map(|v| decode(v.value())).transpose()
    }
}

/// The run `run` was forked from and the point (`STEP[/TURN]`), when it is a fork
/// (`treadle run --fork`); read without creating any table, for `treadle runs` and the API.
pub fn forked_from(db: &Database, run: u64) -> Option<(u64, String)> {
    let txn = db.begin_read().ok()?;
    let table = txn.open_table(LINKS).ok()?;
    let link: RunLink = decode(table.get(run).ok()??.value()).ok()?;
    (link.how == "fork").then(|| (link.of, link.from.unwrap_or_default()))
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// `old` as the state file holds it (the format byte, then its JSON), read as `T` and
    /// written again: the JSON written back, and the value read.
    pub(crate) fn reread<T: Serialize + DeserializeOwned>(old: &Value) -> (Value, T) {
        let mut bytes = vec![1u8];
        bytes.extend(old.to_string().into_bytes());
        let read: T = decode(&bytes).expect("today's record reads");
        let again = encode(&read).expect("it writes");
        (decode(&again).expect("and reads back"), read)
    }

    #[test]
    fn a_success_record_of_todays_format_reads_and_writes_the_same_keys() {
        let zero = "00".repeat(32);
        // Written by the struct before `Produced` was taken out of it, field by field.
        let old = json!({
            "key": zero,
            "parts": {"kind": "task", "config": zero, "inputs": {}, "prev": zero},
            "run": 3,
            "seq": 1,
            "outputs": [],
            "exit_code": 2,
            "stdout_tail": "out\nerr\n",
            "streams": {"stdout": "out\n", "stderr": "err\n", "cut": true},
            "verdict": "pass",
            "note": "looks right",
            "usage": {"input_tokens": 5},
            "events": [],
            "version": null,
            "commits": {"repo": "abc"},
            "last_used_ms": 7,
        });
        let (again, read) = reread::<SuccessRecord>(&old);
        assert_eq!(again, old);
        let produced = Produced {
            exit_code: Some(2),
            stdout_tail: "out\nerr\n".to_owned(),
            streams: Some(Streams {
                stdout: "out\n".to_owned(),
                stderr: "err\n".to_owned(),
                cut: true,
            }),
            verdict: Some("pass".to_owned()),
            note: Some("looks right".to_owned()),
            usage: Some(json!({"input_tokens": 5})),
        };
        assert_eq!(read.produced, produced);
        // An older record, without the keys added since, reads with their defaults.
        let older = json!({
            "key": zero,
            "parts": {"kind": "task", "config": zero, "inputs": {}, "prev": zero},
            "run": 3,
            "seq": 1,
            "outputs": [],
        });
        let (_, read) = reread::<SuccessRecord>(&older);
        assert_eq!(read.produced, Produced::default());
    }
}
