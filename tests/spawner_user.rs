//! A program that links treadle's library (a Rust workflow's) runs a shell step both ways
//! a keeper can start: with `treadle::keeper::start_spawner()` first in its `main` (the
//! keeper is then the spawner's clone, named `treadle-keeper`, still this program's
//! child), and without it (a fork of the program). Its own `main` (`harness = false`):
//! run with no argument, it runs itself once each way and checks both.

use std::process::ExitCode;

use treadle::workflow::{self, Flow, FlowError, Options, Shell, Workflow};

/// One shell step, unconfined so that it can read its keeper's `/proc` entry, printing
/// its keeper's name and parent and the descriptors it holds.
struct Probe;

impl Workflow for Probe {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "probe";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let probe =
            Shell::new("grep -E '^(Name|PPid):' /proc/$PPID/status; ls /proc/self/fd").unconfined();
        Ok(flow.shell("probe", probe).await?.stdout)
    }
}

/// Runs [`Probe`] in a fresh state file; its output, or why it failed.
fn probe() -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let state = dir.path().join(".treadle/state.redb");
    let report = runtime
        .block_on(workflow::run(&Probe, (), Options::new(&state)))
        .map_err(|e| e.to_string())?;
    match (report.exit_code(), report.output) {
        (0, Ok(out)) => Ok(out),
        (code, out) => Err(format!("the run ended {code}: {out:?}")),
    }
}

/// Checks what the probe printed: the keeper is this process's child, named as `named`
/// says, and the command holds 0 to 2 (and `ls`'s 3) only.
fn check(out: &str, from_spawner: bool) -> Result<(), String> {
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    let me = std::process::id().to_string();
    if field("PPid:") != me {
        return Err(format!("the keeper is not this process's child:\n{out}"));
    }
    if (field("Name:") == "treadle-keeper") != from_spawner {
        return Err(format!("from the spawner: {from_spawner}, but:\n{out}"));
    }
    let fds: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    if fds.iter().any(|fd| *fd > 3) {
        return Err(format!("the command got more than 0-2: {fds:?}"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let way = std::env::args().nth(1);
    let result = match way.as_deref() {
        Some("spawner") => treadle::keeper::start_spawner()
            .map_err(|e| e.to_string())
            .and_then(|()| probe())
            .and_then(|out| check(&out, true)),
        Some("fork") => probe().and_then(|out| check(&out, false)),
        _ => both(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", way.as_deref().unwrap_or("spawner_user"));
            ExitCode::FAILURE
        }
    }
}

/// Runs this program each way, in a process of its own (the spawner must be started first
/// in `main`).
fn both() -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    for way in ["spawner", "fork"] {
        let status = std::process::Command::new(&me)
            .arg(way)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("the {way} way failed ({status})"));
        }
        println!("test spawner_user::{way} ... ok");
    }
    println!("test result: ok. 2 passed; 0 failed");
    Ok(())
}
