//! `treadle test`: runs every job of a pipeline, one after the other in one state file,
//! and reports which passed. A job passes when its run succeeds, which includes every
//! step's `assert:` and the job's own `assert: { execution, outcome }` (an asserted
//! `outcome: failure` that happened is a pass).

use crate::console::say;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, signals};
use crate::pipeline::duration::format_duration;
use crate::run::{self, RunOptions, Status, Style};

pub(super) async fn test(file: &Path, json: bool, state: Option<PathBuf>) -> u8 {
    let loaded = match super::load_or_exit(file, None, false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Err(code) = super::needs_or_exit(&loaded) {
        return code;
    }
    let state_path = run::state_path(file, state);
    let store = match run::open_store(state_path).await {
        Ok(s) => s,
        Err(e) => {
            crate::console::tell!("{}: {e}", file.display());
            return EXIT_CONFIG;
        }
    };
    let cancel = CancellationToken::new();
    let watch = signals::watch(cancel.clone());
    let agents = run::agents::default_agent_runner();
    let mut results = Vec::new();
    for job in loaded.pipeline.jobs.iter().map(|j| j.name.value.clone()) {
        if cancel.is_cancelled() {
            break;
        }
        let options = RunOptions {
            job: Some(job.clone()),
            style: Style::detect(json),
            state: None,
            cancel: cancel.clone(),
            versions: Default::default(),
        };
        let started = Instant::now();
        let report = run::run_in(&loaded, options, store.clone(), agents.clone()).await;
        match report {
            Ok(r) => results.push((job, r.status, r.error, started.elapsed())),
            Err(e) => {
                crate::console::tell!("{}: job {job}: {e}", file.display());
                return EXIT_CONFIG;
            }
        }
    }
    let summary = |line: String| {
        // With --json, stdout holds only events; the verdicts go to stderr.
        if json {
            crate::console::tell!("{line}");
        } else {
            say!("{line}");
        }
    };
    summary(String::new());
    let mut failed = 0;
    for (job, status, error, took) in &results {
        let took = format_duration(*took);
        if *status == Status::Succeeded {
            summary(format!("test {job} ... ok ({took})"));
        } else {
            failed += 1;
            let why = error.as_deref().unwrap_or("failed");
            summary(format!("test {job} ... FAILED ({took}): {why}"));
        }
    }
    let mut passed = results.len() - failed;
    if let Some(expected) = loaded
        .pipeline
        .assert
        .as_ref()
        .and_then(|a| a.execution.as_ref())
        && !cancel.is_cancelled()
    {
        let ran: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
        if *expected == ran {
            passed += 1;
            summary("test (pipeline assert) ... ok".to_owned());
        } else {
            failed += 1;
            summary(format!(
                "test (pipeline assert) ... FAILED: assert execution: expected the jobs [{}] to run, but [{}] ran",
                expected.join(", "),
                ran.join(", ")
            ));
        }
    }
    summary(format!("{passed} passed, {failed} failed"));
    if cancel.is_cancelled() {
        watch.exit_code(EXIT_INTERRUPTED)
    } else if failed > 0 {
        EXIT_FAILED
    } else {
        0
    }
}
