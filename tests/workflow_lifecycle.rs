//! A Rust workflow's run has the lifecycle a YAML job's has (`treadle::run::lifecycle`):
//! the job's `timeout:` (`Options::timeout`) keeps the next step from starting once it has
//! passed, with the YAML job's words; agents with `fallback:` start on the source the
//! pre-run probe picked, or the step fails before anything is spent when none answers, as
//! a YAML job's first step does; and every step shares the run's state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use treadle::run::Store;
use treadle::workflow::{self, AgentTask, Agents, Flow, FlowError, Options, Shell, Workflow};
use treadle_scripted::{Reply, Script, ScriptedServer};

use crate::common::{Fixture, dead_url};

/// A slow step, then one that must not start once the run's timeout has passed.
struct SlowThenQuick;

impl Workflow for SlowThenQuick {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "slow-then-quick";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<(), FlowError> {
        flow.shell("slow", Shell::new("sleep 0.6")).await?;
        flow.shell("quick", Shell::new("echo ran")).await?;
        Ok(())
    }
}

/// One step of agent `writer`.
struct Announce;

impl Workflow for Announce {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "announce";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let reply = flow
            .agent("write", AgentTask::new("writer", "Write the announcement."))
            .await?;
        Ok(reply.text)
    }
}

/// `writer` on `primary`, falling back to `second`.
fn writer(primary: &str, second: &str) -> Agents {
    let agents = json!({ "agents": [{
        "name": "writer",
        "source": { "endpoint": primary, "model": "primary-model" },
        "fallback": [{ "source": { "endpoint": second, "model": "second-model" } }],
    }]});
    Agents::from_yaml(&agents.to_string()).expect("agents")
}

fn state_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".treadle/state.redb")
}

/// The text of every notice of run `run`.
fn notices(state: &Path, run: u64) -> Vec<String> {
    let store = Store::open(state).expect("state file");
    treadle::run::event_log::read_after(&store.database(), run, 0)
        .expect("events")
        .into_iter()
        .filter(|e| e.kind == "notice")
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.json).expect("json");
            v["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_past_its_timeout_starts_no_step_as_a_yaml_job_does() {
    let said = "job timeout: 0.30s passed before the next step could start";
    let yaml = Fixture::new(
        "jobs:\n- name: slow-then-quick\n  timeout: 300ms\n  plan:\n  - task: slow\n    run: sleep 0.6\n  - task: quick\n    run: echo ran\n",
    );
    let run = tokio::task::spawn_blocking(move || yaml.treadle(&["run"]))
        .await
        .expect("thread");
    run.expect_code(1);
    assert!(run.stdout().contains(said), "{}", run.stdout());

    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).timeout(Duration::from_millis(300));
    let report = workflow::run(&SlowThenQuick, (), options)
        .await
        .expect("run");
    match &report.output {
        Err(FlowError::Step { name, error, .. }) => {
            assert_eq!(name, "quick");
            assert_eq!(error.as_deref(), Some(said));
        }
        other => panic!("the quick step started after the timeout: {other:?}"),
    }
    assert_eq!(report.exit_code(), 1);
    let store = Store::open(&state_in(&dir)).expect("state file");
    let steps = store.steps(report.run).expect("steps");
    let quick = steps.iter().find(|s| s.name == "quick").expect("quick");
    assert_eq!(quick.status.as_str(), "skipped", "{quick:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_agent_starts_on_the_fallback_the_probe_picked() {
    let live = ScriptedServer::start(Script::new([Reply::text("Announcement written")]))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).agents(writer(&dead_url(), live.base_url()));
    let report = workflow::run(&Announce, (), options).await.expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    let said = notices(&state_in(&dir), report.run);
    assert!(
        said.iter().any(
            |n| n.starts_with("agent.failover: preflight: `primary-model` at ")
                && n.ends_with("`second-model` serves agent `writer` in this run")
        ),
        "{said:?}"
    );
    // The picked source served the step from its first request: the probe asked nothing.
    let bodies: Vec<serde_json::Value> = live.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["model"], json!("second-model"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_agent_with_no_source_up_fails_before_its_step_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).agents(writer(&dead_url(), &dead_url()));
    let report = workflow::run(&Announce, (), options).await.expect("run");
    match &report.output {
        Err(FlowError::Step { name, error, .. }) => {
            assert_eq!(name, "write");
            let error = error.as_deref().unwrap_or_default();
            assert!(
                error.starts_with(
                    "preflight: no source of agent `writer` answers, so no step was run"
                ),
                "{error}"
            );
        }
        other => panic!("the step ran with no source up: {other:?}"),
    }
    let store = Store::open(&state_in(&dir)).expect("state file");
    let steps = store.steps(report.run).expect("steps");
    assert_eq!(steps[0].status.as_str(), "skipped", "{steps:?}");
}
