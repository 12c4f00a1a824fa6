//! `treadle run`: load, run one job, map the result to an exit code; Ctrl-C, SIGTERM and
//! SIGHUP interrupt (see `signals`).

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::tape::{self, TapeArgs};
use super::{EXIT_CONFIG, signals};
use crate::run::{self, RunOptions, Style};

pub(super) async fn run(
    file: &Path,
    job: Option<String>,
    json: bool,
    state: Option<PathBuf>,
    tape_args: TapeArgs,
    start: crate::cache::Start,
) -> u8 {
    let loaded = match super::load_or_exit(file, job.as_deref(), false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let tape = match tape_args.open(&loaded, job.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            crate::console::tell!("{e}");
            return EXIT_CONFIG;
        }
    };
    let cancel = CancellationToken::new();
    let watch = signals::watch(cancel.clone());
    let state_path = run::state_path(file, state);
    let agents = run::agents::taped_agent_runner(tape.clone());
    let options = RunOptions {
        job,
        style: Style::detect(json),
        state: Some(state_path.clone()),
        cancel,
    };
    let report = match run::open_store(state_path).await {
        Ok(store) => run::run_from(&loaded, options, store, agents, &start).await,
        Err(e) => Err(e.into()),
    };
    match report {
        Ok(r) => tape::conclude(watch.exit_code(r.exit_code()), tape.as_deref()),
        Err(e) => {
            crate::console::tell!("{}: {e}", file.display());
            EXIT_CONFIG
        }
    }
}
