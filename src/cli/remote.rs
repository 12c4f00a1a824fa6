//! The commands through a running `treadle serve` that owns the state file: `run` starts
//! the run in the server and prints its event stream with the same transcript renderer
//! (Ctrl-C cancels it there), `runs`, `plan` and `approvals` print what the server answers as
//! they print the state file's records, and `approve` / `reject` answer through it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, signals};
use crate::run::approval::mailbox::Answer;
use crate::run::state::StepRecord;
use crate::run::transcript::{Redactor, Style, Transcript};
use crate::server::approvals::ApprovalView;
use crate::server::client::{Client, ClientError, SseParser};
use crate::server::views::{PipelineView, RunView, StepNode};

/// The server that owns `file`'s state file, if one runs.
pub(super) async fn server_for(file: &Path, state: Option<PathBuf>) -> Option<Client> {
    Client::find(&crate::run::state_path(file, state)).await
}

/// Why a command could not go through the server.
#[derive(Debug, thiserror::Error)]
enum RemoteError {
    /// The server did not answer, or refused.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The server owns the file's state file but does not serve the file.
    #[error(
        "{} is not served by {server}, which owns its state file\nhint: serve it too (`treadle serve {}`), or stop that server",
        .file.display(),
        .dir.display()
    )]
    NotServed {
        /// The pipeline file.
        file: PathBuf,
        /// The server (`who()`).
        server: String,
        /// The directory to serve.
        dir: PathBuf,
    },
}

/// The name the server serves `file` under.
async fn served_name(client: &Client, file: &Path) -> Result<String, RemoteError> {
    let pipelines: Vec<PipelineView> = client.get("/api/v1/pipelines").await?;
    // The server owns this file's state file, so it serves the files of this file's
    // directory: the file name identifies it (the server's paths are relative to where it
    // was started, not to here).
    let found = pipelines
        .iter()
        .find(|p| Path::new(&p.file).file_name() == file.file_name());
    found
        .map(|p| p.name.clone())
        .ok_or_else(|| RemoteError::NotServed {
            file: file.to_path_buf(),
            server: client.who(),
            dir: crate::pipeline::dir_of(file),
        })
}

fn say_refused(e: impl std::fmt::Display) -> u8 {
    crate::console::tell!("treadle: {e}");
    EXIT_CONFIG
}

/// `treadle run` through the server.
pub(super) async fn run(client: Client, file: &Path, job: Option<String>, json: bool) -> u8 {
    // Watching before the run starts: a Ctrl-C from then on cancels it.
    let cancel = CancellationToken::new();
    let watch = signals::watch(cancel.clone());
    let name = match served_name(&client, file).await {
        Ok(n) => n,
        Err(e) => return say_refused(e),
    };
    let vars = super::VARS.get().cloned().unwrap_or_default();
    let body = serde_json::json!({ "pipeline": name, "job": job, "trigger": "cli", "vars": vars });
    start_and_follow(client, "/api/v1/runs", &body, json, cancel, watch).await
}

/// `treadle run --fork RUN --at STEP[/TURN] [--prompt TEXT]` through the server: its fork
/// endpoint starts the fork as `treadle run --fork` starts it, then it is followed as a run.
pub(super) async fn fork(
    client: Client,
    file: &Path,
    fork: crate::cache::ForkRun,
    json: bool,
) -> u8 {
    let cancel = CancellationToken::new();
    let watch = signals::watch(cancel.clone());
    // The server forks the run with the pipeline the run was made from; the file named here
    // must still be one it serves, as for a plain run.
    if let Err(e) = served_name(&client, file).await {
        return say_refused(e);
    }
    let body = serde_json::json!({ "at": fork.at, "prompt": fork.prompt, "trigger": "cli" });
    let path = format!("/api/v1/runs/{}/fork", fork.of);
    start_and_follow(client, &path, &body, json, cancel, watch).await
}

/// Starts a run with `POST path` and prints its events until it ends; a Ctrl-C (`cancel`)
/// cancels it in the server.
async fn start_and_follow(
    client: Client,
    path: &str,
    body: &serde_json::Value,
    json: bool,
    cancel: CancellationToken,
    watch: signals::Watch,
) -> u8 {
    let started: Result<serde_json::Value, _> = client.post(path, body).await;
    let id = match started.map(|v| v["id"].as_u64()) {
        Ok(Some(id)) => id,
        Ok(None) => return say_refused("the server's answer has no run id"),
        Err(e) => return say_refused(e),
    };
    let canceller = {
        let (client, cancel) = (client.clone(), cancel.clone());
        tokio::spawn(async move {
            cancel.cancelled().await;
            let answer: Result<serde_json::Value, _> = client
                .post(&format!("/api/v1/runs/{id}/cancel"), &serde_json::json!({}))
                .await;
            if let Err(e) = answer {
                crate::console::tell!("treadle: cannot cancel run {id}: {e}");
            }
        })
    };
    // Secrets were masked by the server before the events were journaled.
    let transcript = Transcript::new(Style::detect(json), Redactor::default());
    let code = follow(&client, id, &transcript).await;
    canceller.abort();
    watch.exit_code(code)
}

/// `treadle runs --show RUN` through the server: the run's events as `treadle run`
/// showed them (a run still going is followed to its end).
pub(super) async fn show(client: Client, id: u64, json: bool) -> u8 {
    let transcript = Transcript::new(
        if json { Style::Json } else { Style::Plain },
        Redactor::default(),
    );
    match follow(&client, id, &transcript).await {
        // The run's own outcome is not this command's: it printed what was recorded.
        EXIT_FAILED | EXIT_INTERRUPTED | 0 => 0,
        code => code,
    }
}

/// Prints run `id`'s events until it ends, reconnecting after a dropped connection from
/// the last event seen; returns the exit code its end calls for.
async fn follow(client: &Client, id: u64, transcript: &Transcript) -> u8 {
    let mut cursor = 0;
    let mut failures = 0;
    loop {
        let response = match client.events(id, cursor).await {
            Ok(r) => r,
            Err(e) if failures < 5 => {
                failures += 1;
                tracing::debug!("reconnecting to run {id}'s events: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => return say_refused(e),
        };
        let mut parser = SseParser::default();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            failures = 0;
            for event in parser.feed(&chunk) {
                match event.event.as_str() {
                    "token" | "message" => {}
                    "end" => return EXIT_CONFIG,
                    "error" => return say_refused(event.data),
                    kind => {
                        cursor = event.id.unwrap_or(cursor);
                        transcript.replay(&event.data);
                        if kind == "run_finished" {
                            return exit_code_of(&event.data);
                        }
                    }
                }
            }
        }
        failures += 1;
        if failures > 5 {
            return say_refused(format!("lost {} while following run {id}", client.who()));
        }
    }
}

/// The exit code of a run's `run_finished` event, as `treadle run` exits without a server.
fn exit_code_of(data: &str) -> u8 {
    let v: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    match v["status"].as_str() {
        Some("succeeded") => 0,
        Some("failed") => EXIT_FAILED,
        Some("aborted") => EXIT_INTERRUPTED,
        _ => EXIT_CONFIG,
    }
}

/// Every run (oldest first, as the state file lists them), with their steps when asked.
async fn all_runs(client: &Client, with_steps: bool) -> Result<Vec<RunView>, ClientError> {
    let mut runs: Vec<RunView> = client.get("/api/v1/runs").await?;
    runs.reverse();
    if with_steps {
        for r in &mut runs {
            *r = one_run(client, r.id).await?;
        }
    }
    Ok(runs)
}

async fn one_run(client: &Client, id: u64) -> Result<RunView, ClientError> {
    client.get(&format!("/api/v1/runs/{id}")).await
}

fn steps_of(view: &RunView) -> Vec<StepRecord> {
    let mut out = Vec::new();
    StepNode::flatten(view.steps.as_deref().unwrap_or_default(), &mut out);
    out.sort_by_key(|s| s.seq);
    out
}

/// `treadle runs` (with `--steps`, `--cost`) through the server.
pub(super) async fn runs(
    client: Client,
    steps: Option<u64>,
    cost: bool,
    only: Option<&Path>,
) -> u8 {
    let of_file = |runs: Vec<RunView>| -> Vec<RunView> {
        runs.into_iter()
            .filter(|r| super::inspect::is_of(only, &r.file))
            .collect()
    };
    let shown = match (steps, cost) {
        (None, false) => all_runs(&client, false).await.map(of_file).map(|runs| {
            let records: Vec<_> = runs.iter().map(RunView::record).collect();
            let stopped = |id: u64| runs.iter().any(|r| r.id == id && r.interrupted);
            let forked = |id: u64| {
                let run = runs.iter().find(|r| r.id == id)?;
                let from = run.forked_from.as_ref()?;
                Some((from.run, from.at.clone()))
            };
            let waiting = |id: u64| runs.iter().find(|r| r.id == id)?.waiting.clone();
            super::inspect::print_runs(&records, (&stopped, &waiting), &forked, only.is_none());
        }),
        (None, true) => all_runs(&client, true).await.map(of_file).map(|runs| {
            let all: Vec<_> = runs.iter().map(|r| (r.record(), steps_of(r))).collect();
            super::cost::print_runs(&all, only.is_none());
        }),
        (Some(id), false) => one_run(&client, id)
            .await
            .map(|r| super::inspect::print_steps(&steps_of(&r))),
        (Some(id), true) => one_run(&client, id)
            .await
            .map(|r| super::cost::print_steps(&steps_of(&r))),
    };
    match shown {
        Ok(()) => 0,
        Err(e) => say_refused(e),
    }
}

/// `treadle plan` through the server.
pub(super) async fn plan(client: Client, file: &Path, job: Option<&str>, json: bool) -> u8 {
    let name = match served_name(&client, file).await {
        Ok(n) => n,
        Err(e) => return say_refused(e),
    };
    let query = job.map_or_else(String::new, |j| format!("?job={j}"));
    let plans: Result<Vec<serde_json::Value>, _> = client
        .get(&format!("/api/v1/pipelines/{name}/plan{query}"))
        .await;
    match plans {
        Ok(plans) => {
            for p in plans {
                if json {
                    let steps = serde_json::json!({ "job": p["job"], "steps": p["steps"] });
                    crate::console::text(&format!("{steps}\n"));
                } else {
                    crate::console::text(p["text"].as_str().unwrap_or_default());
                }
            }
            0
        }
        Err(e) => say_refused(e),
    }
}

/// `treadle approvals` through the server: the approvals its runs wait on.
pub(super) async fn approvals(client: Client) -> u8 {
    let pending: Vec<ApprovalView> = match client.get("/api/v1/approvals?state=pending").await {
        Ok(p) => p,
        Err(e) => return say_refused(e),
    };
    let rows = pending.into_iter().map(|a| super::approvals::Waiting {
        run: a.run,
        seq: a.seq,
        name: a.step,
        job: a.job,
        asked_ms: a.asked_ms,
        deadline_ms: a.deadline_ms,
        on_timeout: a.on_timeout,
        message: a.message.unwrap_or_default(),
        policy: a.policy,
        answers: a.answers,
    });
    super::approvals::print(rows.collect());
    0
}

/// `treadle approve` / `treadle reject` through the server: `step` is the step's number in
/// the run or its name.
pub(super) async fn answer(client: Client, run: u64, step: &str, answer: Answer) -> u8 {
    let pending: Vec<ApprovalView> = match client.get("/api/v1/approvals?state=pending").await {
        Ok(p) => p,
        Err(e) => return say_refused(e),
    };
    let Some(waiting) = pending
        .iter()
        .find(|a| a.run == run && (a.seq.to_string() == step || a.step == step))
    else {
        crate::console::tell!(
            "run {run} has no approval waiting at step `{step}`\nhint: `treadle approvals` lists the approvals waiting now"
        );
        return EXIT_CONFIG;
    };
    let (decision, verb) = match answer {
        Answer::Approve => ("approve", "approved"),
        Answer::Reject => ("reject", "rejected"),
    };
    let by = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "someone".to_owned());
    let body = serde_json::json!({ "decision": decision, "by": by });
    let path = format!("/api/v1/runs/{run}/approvals/{}", waiting.seq);
    let answered: Result<ApprovalView, _> = client.post(&path, &body).await;
    match answered {
        Ok(a) => {
            crate::console::say!("{verb} run {} step {} ({})", a.run, a.seq, a.step);
            0
        }
        Err(e) => {
            crate::console::tell!("{e}\nhint: `treadle approvals` lists the approvals waiting now");
            EXIT_CONFIG
        }
    }
}
