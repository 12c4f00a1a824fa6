//! `fallback:` before the first step: when an agent's primary cannot be reached, the run
//! probes its fallbacks in order and the first that answers serves the agent's steps (and
//! the run says so); when none answers, the run fails before any step, naming each source.

use crate::common;

use common::{Fixture, Run, dead_url};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

const WRITER: &str = r#"
agents:
- name: writer
  source: { endpoint: "{PRIMARY}", model: primary-model }
  fallback:
  - source: { endpoint: "{SECOND}", model: second-model }
  - source: { endpoint: "{THIRD}", model: third-model }
jobs:
- name: publish
  plan:
  - agent: writer
    prompt: "Write the announcement."
"#;

async fn run(yaml: String) -> Run {
    tokio::task::spawn_blocking(move || Fixture::new(&yaml).treadle(&["run"]))
        .await
        .expect("the treadle run's thread")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_primary_hands_the_step_to_the_first_fallback_that_answers() {
    let live = ScriptedServer::start(Script::new([Reply::text("Announcement written")]))
        .await
        .expect("server");
    let yaml = WRITER
        .replace("{PRIMARY}", &dead_url())
        .replace("{SECOND}", live.base_url())
        .replace("{THIRD}", &dead_url());
    let run = run(yaml).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("agent.failover: preflight: `primary-model` at "),
        "{out}"
    );
    assert!(
        out.contains("`second-model` serves agent `writer` in this run"),
        "{out}"
    );
    assert!(out.contains("Announcement written"), "{out}");
    // The live source served the step: one model call, for its model; the probe asked it
    // nothing.
    let bodies: Vec<serde_json::Value> = live.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["model"], json!("second-model"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_with_every_source_down_fails_before_any_step_naming_each() {
    let yaml = WRITER
        .replace("{PRIMARY}", &dead_url())
        .replace("{SECOND}", &dead_url())
        .replace("{THIRD}", &dead_url());
    let run = run(yaml).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    let all = format!("{}{}", run.stdout(), run.stderr());
    assert!(
        all.contains("preflight: no source of agent `writer` answers, so no step was run"),
        "{all}"
    );
    for model in ["primary-model", "second-model", "third-model"] {
        assert!(
            all.contains(&format!("`{model}` at http://127.0.0.1:")),
            "{model}: {all}"
        );
    }
    assert!(all.contains("unreachable"), "{all}");
    assert!(!all.contains("▶ writer"), "a step ran: {all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_job_assert_the_run_still_says_why_no_step_ran() {
    // steps' own example asserts the job; the assert's failure must not hide the reason.
    let yaml = format!(
        "{}  assert:\n    execution: [writer]\n    outcome: succeeded\n",
        WRITER
            .replace("{PRIMARY}", &dead_url())
            .replace("{SECOND}", &dead_url())
            .replace("{THIRD}", &dead_url())
    );
    let run = run(yaml).await;
    assert_eq!(run.code(), 1, "{}", run.stdout());
    // The run's error, a clause a line under its last line: the job assert, then why
    // the plan failed.
    let out = run.stdout();
    let error: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("run 1 failed in "))
        .skip(1)
        .collect();
    let at = |start: &str| error.iter().position(|l| l.starts_with(start));
    let assert = at("  job assert failed: assert execution: expected the steps [writer] to run");
    let plan =
        at("  the plan failed: preflight: no source of agent `writer` answers, so no step was run");
    assert!(assert.is_some() && plan.is_some() && assert < plan, "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_primary_serves_and_nothing_is_said() {
    let live = ScriptedServer::start(Script::new([Reply::text("Announcement written")]))
        .await
        .expect("server");
    let yaml = WRITER
        .replace("{PRIMARY}", live.base_url())
        .replace("{SECOND}", &dead_url())
        .replace("{THIRD}", &dead_url());
    let run = run(yaml).await;
    run.expect_code(0);
    assert!(!run.stdout().contains("agent.failover"), "{}", run.stdout());
    let bodies: Vec<serde_json::Value> = live.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["model"], json!("primary-model"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_agent_runs_on_the_fallback_the_probe_picked_for_it() {
    let live = ScriptedServer::start(Script::new([
        Reply::tool_call("helper", json!({ "request": "Say hi." })),
        Reply::text("hi from the helper"),
        Reply::text("The helper said hi."),
    ]))
    .await
    .expect("server");
    let yaml = r#"
agents:
- name: helper
  source: { endpoint: "{DOWN}", model: helper-primary }
  fallback:
  - source: { endpoint: "{LIVE}", model: helper-backup }
- name: lead
  source: { endpoint: "{LIVE}", model: lead-model }
  tools:
  - agent: helper
jobs:
- name: j
  plan:
  - agent: lead
    prompt: Ask the helper.
"#
    .replace("{DOWN}", &dead_url())
    .replace("{LIVE}", live.base_url());
    let run = run(yaml).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("`helper-backup` serves agent `helper` in this run"),
        "{out}"
    );
    let models: Vec<serde_json::Value> = live
        .requests()
        .into_iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(
        models,
        [
            json!("lead-model"),
            json!("helper-backup"),
            json!("lead-model")
        ]
    );
}
