//! Who started each run the server started (`cli`, `web`, `api`), in the state file. A run
//! with no entry was started by `treadle run` without a server: `cli`.

use std::collections::HashMap;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::run::StateError;

const RUN_TRIGGERS: TableDefinition<u64, &str> = TableDefinition::new("run_triggers");

fn db_err(e: impl Into<redb::Error>) -> StateError {
    StateError::of_redb(e.into())
}

/// Records who started run `id`.
pub fn set(db: &Database, id: u64, trigger: &str) -> Result<(), StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    txn.open_table(RUN_TRIGGERS)
        .map_err(db_err)?
        .insert(id, trigger)
        .map_err(db_err)?;
    txn.commit().map_err(db_err)
}

/// Every recorded trigger, by run.
pub fn all(db: &Database) -> Result<HashMap<u64, String>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(RUN_TRIGGERS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(HashMap::new()),
        Err(e) => return Err(db_err(e)),
    };
    let mut out = HashMap::new();
    for entry in table.iter().map_err(db_err)? {
        let (k, v) = entry.map_err(db_err)?;
        out.insert(k.value(), v.value().to_owned());
    }
    Ok(out)
}
