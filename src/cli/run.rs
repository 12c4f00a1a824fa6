//! `treadle run`: load, run one job, map the result to an exit code; Ctrl-C, SIGTERM and
//! SIGHUP interrupt (see `signals`). When `treadle serve` owns the state file, the run goes
//! through it (see `remote`).

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
    if let Some(client) = super::remote::server_for(file, state.clone()).await {
        let through = match start {
            crate::cache::Start::Fresh => None,
            // A fork goes to the server's fork endpoint, which starts it as this would.
            crate::cache::Start::Fork(fork) => Some(fork),
            _ => return refuse_through(&client),
        };
        if tape_args.record.is_some() || tape_args.replay.is_some() {
            return refuse_through(&client);
        }
        return match through {
            None => super::remote::run(client, file, job, json).await,
            Some(fork) => super::remote::fork(client, file, fork, json).await,
        };
    }
    let loaded = match super::load_or_exit(file, job.as_deref(), false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Err(code) = super::needs_or_exit(&loaded) {
        return code;
    }
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
        versions: Default::default(),
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

/// What `treadle run` says of the options a server that owns the state file does not take.
fn refuse_through(client: &crate::server::client::Client) -> u8 {
    crate::console::tell!(
        "treadle: {} owns the state file; --record, --replay-model, --resume, --replay, --force and --rerun do not go through it yet\nhint: stop the server, or run without them",
        client.who()
    );
    EXIT_CONFIG
}

/// The message a forked run's step goes on with: `--prompt`, or the text of
/// `--prompt-file` (an error, said, when it cannot be read).
pub(super) fn fork_prompt(
    prompt: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<String>, ()> {
    let Some(file) = file else {
        return Ok(prompt);
    };
    std::fs::read_to_string(&file).map(Some).map_err(|e| {
        crate::console::tell!("treadle: cannot read {}: {e}", file.display());
    })
}
