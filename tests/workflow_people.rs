//! The calls of a Rust workflow that wait for people, run in this process while the
//! `treadle` binary answers from outside, as a person would: examples/people_workflow.rs's
//! release takes a typed answer through `treadle answer`, records its `when` branch, and
//! waits for two of three assignees (a stranger refused) through `treadle approve`; its
//! triage decision, below its confidence, waits for a person and gives back the typed
//! value. Branches not taken are recorded as skipped, and a policy nobody could satisfy
//! is refused before anything runs, as loading refuses it in YAML.

use std::path::{Path, PathBuf};

use serde_json::json;
use treadle::run::Store;
use treadle::run::approval::ApprovalStatus;
use treadle::workflow::{self, Agents, Approval, Flow, FlowError, Options, Workflow};
use treadle_scripted::{Reply, Script, ScriptedServer};

use crate::common::Run;

#[path = "../examples/people_workflow.rs"]
#[allow(dead_code)]
pub mod people_workflow;

use people_workflow::{Release, Routing, Triage};

/// `treadle ARGS --state STATE` as `user`, on a blocking thread.
async fn treadle(state: &Path, user: &str, args: &[&str]) -> Run {
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    args.extend(["--state".to_owned(), state.display().to_string()]);
    // The directory holding `.treadle/`, which exists before the run makes `.treadle`.
    let dir = state.parent().and_then(Path::parent).map(Path::to_path_buf);
    let user = user.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"));
        cmd.args(&args).env("USER", user);
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        Run(cmd.output().expect("run treadle"))
    })
    .await
    .expect("thread")
}

/// Waits until `treadle approvals` lists a line holding `text`; gives back the listing.
async fn until_listed(state: &Path, text: &str) -> String {
    let started = std::time::Instant::now();
    loop {
        let out = treadle(state, "someone", &["approvals"]).await.stdout();
        if out.contains(text) {
            return out;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "never listed `{text}`: {out}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn state_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".treadle/state.redb")
}

/// `name status` of each step of `run`.
fn steps(state: &Path, run: u64) -> Vec<String> {
    let store = Store::open(state).expect("state");
    let steps = store.steps(run).expect("steps");
    steps
        .into_iter()
        .map(|r| format!("{} {}", r.name, r.status.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_release_takes_a_typed_answer_and_two_approvals_from_the_cli() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let options = Options::new(&state);
    let run = tokio::spawn(async move { workflow::run(&Release, (), options).await });

    until_listed(&state, "rollout").await;
    let unfit = json!({"replicas": "three", "canary": true}).to_string();
    let refused = treadle(&state, "pat", &["answer", "1", "rollout", "--json", &unfit]).await;
    refused.expect_code(2);
    let rollout = json!({"replicas": 3, "canary": true}).to_string();
    let answered = treadle(
        &state,
        "pat",
        &["answer", "1", "rollout", "--json", &rollout],
    )
    .await;
    answered.expect_code(0);

    let listed = until_listed(&state, "Ship it?").await;
    assert!(listed.contains("2 of alice, bob, carol"), "{listed}");
    assert!(listed.contains("escalates to ops-lead"), "{listed}");
    let stranger = treadle(&state, "mallory", &["approve", "1", "ship"]).await;
    stranger.expect_code(2);
    assert!(
        stranger.stderr().contains("mallory may not answer"),
        "{}",
        stranger.stderr()
    );
    treadle(&state, "alice", &["approve", "1", "ship"])
        .await
        .expect_code(0);
    until_listed(&state, "alice approved").await;
    treadle(&state, "carol", &["approve", "1", "ship"])
        .await
        .expect_code(0);

    let report = run.await.expect("task").expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    assert_eq!(report.output.expect("replicas"), 3);
    assert_eq!(
        steps(&state, report.run),
        [
            "rollout succeeded",
            "canary succeeded",
            "canary-up succeeded",
            "ship succeeded",
            "deploy succeeded"
        ]
    );
    let store = Store::open(&state).expect("state");
    let approvals = store.approvals().expect("approvals");
    let ship = approvals.iter().find(|a| a.name == "ship").expect("ship");
    assert_eq!(ship.status, ApprovalStatus::Approved);
    assert_eq!(ship.by.as_deref(), Some("alice, carol"));
    let policy = ship.policy.as_ref().expect("policy");
    assert_eq!(policy.assignees, ["alice", "bob", "carol"]);
    assert_eq!(policy.escalate_to, ["ops-lead"]);
    let input = approvals
        .iter()
        .find(|a| a.name == "rollout")
        .expect("rollout");
    assert_eq!(input.value, Some(json!({"replicas": 3, "canary": true})));
    assert_eq!(input.by.as_deref(), Some("pat"));
}

/// The triager on the scripted server at `url`.
fn triager(url: &str) -> Agents {
    let yaml = people_workflow::AGENTS.replacen(
        "  - name: triager\n",
        &format!("  - name: triager\n    source: {{ model: scripted, endpoint: \"{url}\" }}\n"),
        1,
    );
    Agents::from_yaml(&yaml).expect("agents")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unsure_decision_waits_for_a_person_and_gives_back_its_typed_value() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "verdict",
            json!({"verdict": "route", "reason": "storage or network?", "confidence": 0.4}),
        ),
        Reply::text(r#"{"team": "storage"}"#),
    ]))
    .await
    .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let options = Options::new(&state).agents(triager(server.base_url()));
    let issue = "disks fill up".to_owned();
    let run = tokio::spawn(async move { workflow::run(&Triage, issue, options).await });
    let listed = until_listed(&state, "confidence 0.40").await;
    assert!(listed.contains("route"), "{listed}");
    treadle(&state, "pat", &["approve", "1", "route"])
        .await
        .expect_code(0);
    let report = run.await.expect("task").expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    assert_eq!(
        report.output.expect("routing"),
        Routing {
            team: "storage".to_owned()
        }
    );
    let store = Store::open(&state).expect("state");
    let asked = store.approvals().expect("approvals");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].by.as_deref(), Some("pat"));
    assert_eq!(asked[0].status, ApprovalStatus::Approved);
}

/// Three labelled branches: one taken, one not (decided by an output), one skipped.
struct Branches;

impl Workflow for Branches {
    type Input = bool;
    type Output = ();
    const NAME: &'static str = "branches";

    async fn run(&self, flow: &mut Flow, big: bool) -> Result<(), FlowError> {
        if flow.when("big", big).await? {
            flow.shell("build", workflow::Shell::new("echo big"))
                .await?;
        }
        let out = flow.shell("probe", workflow::Shell::new("echo no")).await?;
        flow.when_dynamic("retry", out.stdout.trim() == "yes")
            .await?;
        flow.skip("legacy", "retired").await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn branches_are_recorded_as_taken_or_skipped() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let report = workflow::run(&Branches, true, Options::new(&state))
        .await
        .expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    assert_eq!(
        steps(&state, report.run),
        [
            "big succeeded",
            "build succeeded",
            "probe succeeded",
            "retry skipped",
            "legacy skipped"
        ]
    );
}

/// An approval no assignees could satisfy.
struct Impossible;

impl Workflow for Impossible {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "impossible";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<(), FlowError> {
        let gate = Approval::new().assignees(["alice", "bob"]).approvers(3);
        flow.approval("gate", gate).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_nobody_could_satisfy_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let report = workflow::run(&Impossible, (), Options::new(&state))
        .await
        .expect("run");
    assert_eq!(report.exit_code(), 2, "{:?}", report.output);
    let error = report.output.expect_err("refused").to_string();
    assert!(
        error.contains("`approvers: 3` but only 2 `assignees` may answer"),
        "{error}"
    );
    assert!(steps(&state, report.run).is_empty());
}
