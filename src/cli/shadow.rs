//! `treadle run --shadow RUN`: the shadow run of a recorded run (see `crate::shadow`), shown
//! as text or, with `--json`, as one JSON document for CI.

use std::path::Path;

use super::EXIT_CONFIG;
use crate::console::say;
use crate::shadow::{ShadowOptions, shadow};

/// Runs the shadow and returns the exit code: 0 when no step's outcome changed, 1 when a
/// verdict changed, an assert fails or a step failed, 2 when it could not be made.
pub(super) async fn run(file: &Path, json: bool, options: &ShadowOptions) -> u8 {
    let loaded = match super::load_or_exit(file, None, false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let report = match shadow(&loaded, options).await {
        Ok(r) => r,
        Err(e) => {
            crate::console::tell!("treadle: {e}");
            return EXIT_CONFIG;
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => say!("{text}"),
            Err(e) => {
                crate::console::tell!("treadle: {e}");
                return EXIT_CONFIG;
            }
        }
    } else {
        say!("{}", report.render().trim_end());
    }
    u8::from(report.changed())
}
