//! The API-key variables a command line will read, named before any thread starts so
//! that `main` can take them out of the process environment (see `crate::environ`).

use std::path::Path;

use super::{Cli, Command};
use crate::pipeline::{load, resolve, secrets};

/// The providers' own key variables, taken whatever the pipeline says.
pub use crate::pipeline::secrets::PROVIDER_KEYS;

/// Every variable holding a secret of the command's pipeline (every agent's key, used by a
/// job or not, see `crate::pipeline::secrets`), plus [`PROVIDER_KEYS`]. A pipeline that
/// does not load names only those; the command reports its errors later.
pub fn key_vars(cli: &Cli) -> Vec<String> {
    let Some(file) = pipeline_file(&cli.command) else {
        return PROVIDER_KEYS.iter().map(|s| (*s).to_owned()).collect();
    };
    let Ok(mut pipeline) = load::read(file) else {
        return PROVIDER_KEYS.iter().map(|s| (*s).to_owned()).collect();
    };
    // Agents defined in `file:`s and `defaults:` name their keys once resolved.
    let _ = resolve::resolve(file, &mut pipeline);
    secrets::key_vars(&pipeline).into_iter().collect()
}
/// The pipeline file of the commands that may run or check agents.
fn pipeline_file(command: &Command) -> Option<&Path> {
    match command {
        Command::Run { file, .. }
        | Command::Validate { file, .. }
        | Command::Plan { file, .. }
        | Command::Test { file, .. } => Some(file),
        _ => None,
    }
}
