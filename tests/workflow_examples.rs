//! The workflow examples (examples/*_workflow.rs, compiled here as modules) run against
//! the scripted model: the review of examples/review.yml written in Rust, both ways its
//! verdict goes, and the typed fan-out, fresh and resumed.

use std::path::{Path, PathBuf};

use serde_json::json;
use treadle::run::{FailureKind, Status, Store};
use treadle::workflow::{self, Agents, Options};
use treadle_scripted::{Reply, Script, ScriptedServer};

#[path = "../examples/review_workflow.rs"]
#[allow(dead_code)]
pub mod review_workflow;

#[path = "../examples/fanout_workflow.rs"]
#[allow(dead_code)]
pub mod fanout_workflow;

/// examples/review.yml's agents, the reviewer sent to the scripted server at `url`.
fn review_agents(url: &str) -> Agents {
    let yaml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/review.yml"))
            .expect("review.yml");
    let source =
        format!("  - name: reviewer\n    source: {{ model: scripted, endpoint: \"{url}\" }}\n");
    let yaml = yaml.replacen("  - name: reviewer\n", &source, 1);
    Agents::from_yaml(&yaml).expect("agents")
}

/// The fan-out's planner on the scripted server at `url`.
fn planner(url: &str) -> Agents {
    let yaml = fanout_workflow::AGENTS.replacen(
        "  - name: planner\n",
        &format!("  - name: planner\n    source: {{ model: scripted, endpoint: \"{url}\" }}\n"),
        1,
    );
    Agents::from_yaml(&yaml).expect("agents")
}

fn review_replies(verdict: &str) -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Fine notes."}),
        ),
        Reply::tool_call("verdict", json!({"verdict": verdict, "reason": "because"})),
        Reply::text("Done."),
    ]
}

/// (name, status, cached_from) of each step of `run`.
fn steps(state: &Path, run: u64) -> Vec<(String, String, Option<u64>)> {
    steps_in(&Store::open(state).expect("state"), run)
}

/// [`steps`] of an open state file.
fn steps_in(store: &Store, run: u64) -> Vec<(String, String, Option<u64>)> {
    store
        .steps(run)
        .expect("steps")
        .into_iter()
        .map(|r| (r.name, r.status.as_str().to_owned(), r.cached_from))
        .collect()
}

fn state_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".treadle/state.redb")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_review_workflow_publishes_what_the_reviewer_approved() {
    let server = ScriptedServer::start(Script::new(review_replies("approve")))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).agents(review_agents(server.base_url()));
    let report = workflow::run(&review_workflow::Review, (), options)
        .await
        .expect("run");
    assert_eq!(report.status, Status::Succeeded, "{:?}", report.output);
    let published = report.output.expect("output");
    assert!(published.contains("Fine notes.") && published.contains("faster startup"));
    let names: Vec<_> = steps(&state_in(&dir), report.run)
        .into_iter()
        .map(|(n, s, _)| format!("{n} {s}"))
        .collect();
    assert_eq!(
        names,
        ["draft succeeded", "reviewer succeeded", "publish succeeded"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_review_workflow_escalates_a_rejection_and_fails_the_run() {
    let server = ScriptedServer::start(Script::new(review_replies("reject")))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).agents(review_agents(server.base_url()));
    let report = workflow::run(&review_workflow::Review, (), options)
        .await
        .expect("run");
    assert_eq!(report.exit_code(), 1, "{:?}", report.output);
    let error = report.output.expect_err("escalated").to_string();
    assert!(error.contains("escalate"), "{error}");
    let store = Store::open(&state_in(&dir)).expect("state");
    let recorded = steps_in(&store, report.run);
    let names: Vec<_> = recorded
        .iter()
        .map(|(n, s, _)| format!("{n} {s}"))
        .collect();
    assert_eq!(
        names,
        ["draft succeeded", "reviewer succeeded", "escalate failed"]
    );
    let run = store.run(report.run).expect("run");
    assert_eq!(run.status.as_str(), "failed");
    assert_eq!(run.job, "review");
}

const CHAPTERS: &str = r#"{"chapters": ["Starter", "Dough", "Bake"]}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_fan_out_runs_one_step_per_chapter_of_the_typed_answer_and_resumes_without_the_model() {
    let server = ScriptedServer::start(Script::new([
        Reply::text(CHAPTERS),
        Reply::text(r#"{"chapters": ["Flour", "Water"]}"#),
    ]))
    .await
    .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let subject = || "bread".to_owned();
    let options = Options::new(&state).agents(planner(server.base_url()));
    let first = workflow::run(&fanout_workflow::Guide, subject(), options)
        .await
        .expect("run");
    assert_eq!(
        first.output.as_deref().ok(),
        Some("1. Starter\n2. Dough\n3. Bake\n")
    );
    let names: Vec<_> = steps(&state, first.run)
        .into_iter()
        .map(|(n, ..)| n)
        .collect();
    assert_eq!(
        names,
        ["outline", "chapter0", "chapter1", "chapter2", "guide"]
    );
    let request = server.requests().pop().expect("the planner's request");
    assert!(
        request.body.to_string().contains("chapters"),
        "the answer's schema reaches the model: {}",
        request.body
    );

    // Resumed: every step gives back its recorded result, the model is not asked.
    let options = Options::new(&state)
        .agents(planner(server.base_url()))
        .resume(Some(first.run));
    let again = workflow::run(&fanout_workflow::Guide, subject(), options)
        .await
        .expect("resume");
    assert_eq!(again.output.as_deref().ok(), first.output.as_deref().ok());
    assert_eq!(server.request_count(), 1, "a resume asks the model nothing");
    for (name, status, from) in steps(&state, again.run) {
        assert_eq!(
            (status.as_str(), from),
            ("succeeded", Some(first.run)),
            "{name}"
        );
    }

    // A changed input changes the first step's key and, chained, every key after it.
    let options = Options::new(&state)
        .agents(planner(server.base_url()))
        .resume(Some(again.run));
    let changed = workflow::run(&fanout_workflow::Guide, "rye".to_owned(), options)
        .await
        .expect("resume");
    assert_eq!(changed.output.as_deref().ok(), Some("1. Flour\n2. Water\n"));
    assert_eq!(server.request_count(), 2);
    let recorded = steps(&state, changed.run);
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert!(
        recorded
            .iter()
            .all(|(_, s, from)| s == "succeeded" && from.is_none()),
        "{recorded:?}"
    );
}

/// Every ```rust block of docs/workflows.md is a piece of one of the workflow examples
/// (or of the served binary, or of the plan's or the API's test), as written there: the code the
/// reader sees is the code compiled and run above.
#[test]
fn the_workflow_docs_show_the_examples_these_tests_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/workflows.md")).expect("docs/workflows.md");
    // The served binary, the plan's test and the API's are run by
    // proofs/tests/workflow_serve.rs, tests/workflow_plan.rs and tests/workflow_api.rs.
    let examples: Vec<String> = [
        "examples/review_workflow.rs",
        "examples/fanout_workflow.rs",
        "examples/people_workflow.rs",
        "proofs/src/bin/workflow_server.rs",
        "tests/workflow_plan.rs",
        "tests/workflow_api.rs",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root.join(f)).expect("example"))
    .collect();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    assert!(
        blocks.len() >= 3,
        "the review and the fan-out are shown: {blocks:#?}"
    );
    for block in &blocks {
        assert!(
            examples.iter().any(|e| e.contains(block.as_str())),
            "a block of docs/workflows.md is not in the examples as written:\n{block}"
        );
    }
}

/// A workflow whose agent step carries a blank commit message.
struct BlankCommit;

impl workflow::Workflow for BlankCommit {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "blank";

    async fn run(&self, flow: &mut workflow::Flow, (): ()) -> Result<(), workflow::FlowError> {
        let call = workflow::AgentTask::new("planner", "change nothing").commit("  ");
        flow.agent("edit", call).await.map(drop)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blank_commit_message_is_refused_before_the_agent_starts() {
    let server = ScriptedServer::start(Script::new([Reply::text("done")]))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let options = Options::new(state_in(&dir)).agents(planner(server.base_url()));
    let report = workflow::run(&BlankCommit, (), options).await.expect("run");
    assert_eq!(report.exit_code(), 2);
    let error = report.output.expect_err("refused").to_string();
    assert!(error.contains("commit message is empty"), "{error}");
    assert_eq!(server.request_count(), 0, "the agent never started");
    assert!(steps(&state_in(&dir), report.run).is_empty());
}

/// A workflow whose one command exits 3.
struct FailingCheck;

impl workflow::Workflow for FailingCheck {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "failing";

    async fn run(&self, flow: &mut workflow::Flow, (): ()) -> Result<(), workflow::FlowError> {
        flow.shell("check", workflow::Shell::new("exit 3"))
            .await
            .map(drop)
    }
}

#[tokio::test]
async fn a_failed_step_s_error_carries_its_kind_and_the_run_records_it() {
    let dir = tempfile::tempdir().expect("dir");
    let report = workflow::run(&FailingCheck, (), Options::new(state_in(&dir)))
        .await
        .expect("run");
    let error = report.output.expect_err("the command failed");
    assert!(
        matches!(
            error,
            workflow::FlowError::Step {
                failure: Some(FailureKind::ExitStatus),
                ..
            }
        ),
        "{error:?}"
    );
    let store = Store::open(&state_in(&dir)).expect("state");
    let run = store.run(report.run).expect("the run's record");
    assert_eq!(run.failure, Some(FailureKind::ExitStatus), "{run:?}");
}
