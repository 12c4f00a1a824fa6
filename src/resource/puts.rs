//! The versions `put:` steps published: each is recorded in its resource's version history
//! (so a later check's cursor, a watcher's `latest` and a downstream `get` see it) and
//! remembered with the run and step that published it, so that
//!
//! * a `get` later in the same run still fetches what the check reported, not what the
//!   run itself just published (a plan is fixed before its steps change anything);
//! * a watched build's record lists what it published beside what it fetched, so a
//!   `passed: [job]` get can take a version that job put.
//!
//! Table `resource_puts.v1`: `(run, step seq)` → JSON [`Put`]. A step run again (a resumed
//! run) overwrites its own row.

use redb::{ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

use super::history::{self, History, HistoryError, VERSION_IDS, VERSIONS, canonical};
use crate::pipeline::Version;

const PUTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("resource_puts.v1");

/// One version a put published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    /// The resource.
    pub resource: String,
    /// The version it printed (a git push: `{"ref": COMMIT}`).
    pub version: Version,
    /// The put added it to the history (no check had reported it before).
    pub added: bool,
}

fn format_err(resource: &str, e: &serde_json::Error) -> HistoryError {
    HistoryError::Format {
        resource: resource.to_owned(),
        detail: e.to_string(),
    }
}

impl History {
    /// Records `version`, published by step `seq` of run `run` to `resource`, as the
    /// resource's newest version (unless recorded already), keeping at most `cap`
    /// versions (`0`: all), in one transaction with the run's note of it.
    pub fn record_put(
        &self,
        run: u64,
        seq: u64,
        resource: &str,
        version: &Version,
        cap: u32,
    ) -> Result<(), HistoryError> {
        let txn = self.db().begin_write()?;
        {
            let mut versions = txn.open_table(VERSIONS)?;
            let mut ids = txn.open_table(VERSION_IDS)?;
            let added = history::add(&mut versions, &mut ids, resource, version)?;
            if cap > 0 {
                history::prune(&mut versions, &mut ids, resource, u64::from(cap))?;
            }
            let put = Put {
                resource: resource.to_owned(),
                version: version.clone(),
                added,
            };
            let bytes = serde_json::to_vec(&put).map_err(|e| format_err(resource, &e))?;
            txn.open_table(PUTS)?.insert((run, seq), bytes.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// What run `run`'s puts published, in step order.
    pub fn puts_of(&self, run: u64) -> Result<Vec<Put>, HistoryError> {
        let txn = self.db().begin_read()?;
        let table = match txn.open_table(PUTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for e in table.range((run, 0)..=(run, u64::MAX))? {
            let (_, v) = e?;
            let put: Put = serde_json::from_slice(v.value()).map_err(|e| format_err("?", &e))?;
            out.push(put);
        }
        Ok(out)
    }

    /// The newest recorded version of `resource` that run `run` did not add by a put:
    /// what a `get` with `version: latest` fetches in that run.
    pub fn latest_in_run(&self, resource: &str, run: u64) -> Result<Option<Version>, HistoryError> {
        let own: Vec<String> = self
            .puts_of(run)?
            .into_iter()
            .filter(|p| p.added && p.resource == resource)
            .map(|p| canonical(&p.version))
            .collect();
        if own.is_empty() {
            return self.latest(resource);
        }
        let txn = self.db().begin_read()?;
        let t = txn.open_table(VERSIONS)?;
        for e in t.range((resource, 0)..=(resource, u64::MAX))?.rev() {
            let (_, v) = e?;
            let version = history::decode(resource, v.value())?;
            if !own.contains(&canonical(&version)) {
                return Ok(Some(version));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn v(n: &str) -> Version {
        Version::from([("ref".to_owned(), n.to_owned())])
    }

    #[test]
    fn a_put_is_the_newest_version_but_not_for_its_own_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("state.redb")).unwrap();
        let h = History::open(Arc::new(db)).unwrap();
        h.record("r", &[v("1.4.1")], 0, false).unwrap();
        h.record_put(7, 2, "r", &v("1.4.2"), 0).unwrap();
        assert_eq!(h.latest("r").unwrap(), Some(v("1.4.2")));
        assert_eq!(h.latest_in_run("r", 7).unwrap(), Some(v("1.4.1")));
        assert_eq!(h.latest_in_run("r", 8).unwrap(), Some(v("1.4.2")));
        // A later check reporting the put's version does not record it twice.
        assert!(h.record("r", &[v("1.4.2")], 0, true).unwrap().is_empty());
        let puts = h.puts_of(7).unwrap();
        assert_eq!(puts.len(), 1);
        assert_eq!((puts[0].resource.as_str(), puts[0].added), ("r", true));
        assert!(h.puts_of(8).unwrap().is_empty());
        // Publishing a version a check reported already: the run still sees it.
        h.record_put(9, 1, "r", &v("1.4.1"), 0).unwrap();
        assert_eq!(h.latest_in_run("r", 9).unwrap(), Some(v("1.4.2")));
    }
}
