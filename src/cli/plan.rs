//! `treadle plan`: which steps a run would execute and which it would replay, and why
//! each that would run does (see `crate::cache::plan`).

use std::path::Path;

use super::EXIT_CONFIG;
use crate::cache::plan;
use crate::cache::records::Records;
use crate::run::state::Store;

pub(super) fn plan(file: &Path, job: Option<&str>, json: bool) -> u8 {
    let loaded = match super::load_or_exit(file, job, false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let path = crate::run::state_path(file, None);
    // No state file yet: nothing is cached, and planning must not create one.
    let store = if path.exists() {
        match Store::open(&path) {
            Ok(s) => Some(s),
            Err(e) => {
                crate::console::tell!("{e}");
                return EXIT_CONFIG;
            }
        }
    } else {
        None
    };
    let records = match store.as_ref().map(|s| Records::open(s.database())) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            crate::console::tell!("{}: {e}", path.display());
            return EXIT_CONFIG;
        }
        None => None,
    };
    for j in loaded
        .pipeline
        .jobs
        .iter()
        .filter(|j| job.is_none_or(|n| j.name.value == n))
    {
        let lines = plan::plan(&loaded, j, records.as_ref());
        if json {
            let value = plan::to_json(&j.name.value, &lines);
            crate::console::text(&format!("{value}\n"));
        } else {
            crate::console::text(&plan::render(&j.name.value, &lines));
        }
    }
    0
}
