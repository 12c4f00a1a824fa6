//! Agent steps inside pipelines, against the scripted OpenAI-compatible server: the
//! quickstart and review examples, verdict routing, asserts and secrets.

use crate::common;

use common::{Fixture, example};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_runs_on_the_local_model_url() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "inbox/note.txt"})),
        Reply::text("PELICAN").usage(40, 8),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(&example("quickstart.yml"));
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("read_file"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_end().ends_with("│ PELICAN")),
        "answer not shown:\n{out}"
    );
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("reader") && l.contains("succeeded")),
        "{steps}"
    );
    // The note the task wrote reached the model as the tool result.
    let requests = server.requests();
    assert!(
        requests.iter().any(|r| r
            .body
            .to_string()
            .contains("The code word for the launch is PELICAN")),
        "tool result not sent: {:?}",
        requests
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_that_writes_nothing_fails_its_assert() {
    let run = run_scripted(
        &example("quickstart.yml"),
        vec![Reply::text("All done, I wrote the answer.")],
    )
    .await;
    run.expect_code(1);
    assert!(run.stdout().contains("assert failed"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn review_verdict_routes_to_publish() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Fine notes."}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "clear"})),
        Reply::text("Approved."),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(&example("review.yml"));
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("verdict approve"), "{out}");
    assert!(out.contains("escalate skipped"), "{out}");
    assert!(out.contains("Fine notes."), "{out}");
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("escalate") && l.contains("skipped")),
        "{steps}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn explicit_endpoint_and_key_never_printed() {
    // The key reaches the agent the realistic way: a task leaks it into an artifact (and
    // prints it), and the agent reads that file. The tool result is masked before the
    // model or the session journal (in the state file) sees it.
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "leak/k.txt"})),
        Reply::text("I read the file."),
    ]))
    .await
    .expect("server");
    let yaml = format!(
        "agents:\n  - name: a\n    source: {{ model: acme/m1, endpoint: \"{}\", api_key_env: ACME_TEST_KEY }}\n    tools: [read_file]\njobs:\n  - name: j\n    plan:\n      - task: leak\n        outputs: [leak]\n        run: echo \"key ${{ACME_TEST_KEY:-not-inherited}}\" | tee leak/k.txt\n      - agent: a\n        inputs: [leak]\n        prompt: read leak/k.txt\n",
        server.base_url()
    );
    let f = Fixture::new(&yaml);
    let (f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(
            &["run", "--json"],
            &[("ACME_TEST_KEY", "sk-test-very-secret-123")],
        );
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);
    assert!(
        !run.stdout().contains("sk-test-very-secret-123"),
        "{}",
        run.stdout()
    );
    assert!(!run.stderr().contains("sk-test-very-secret-123"));
    let state = std::fs::read(f.path().join(".treadle/state.redb")).unwrap();
    assert!(
        !String::from_utf8_lossy(&state).contains("sk-test-very-secret-123"),
        "key in the state file"
    );
    // It was sent where it belongs: the Authorization header; the model saw it masked.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| !r.body.to_string().contains("very-secret")),
        "key sent to the model"
    );
    // A task's environment is an allow-list: the key is not in it (tool results are
    // masked too; see tools::masked).
    assert!(
        requests
            .iter()
            .any(|r| r.body.to_string().contains("key not-inherited"))
    );
    assert!(
        requests.iter().all(|r| r.body["model"] == "acme/m1"),
        "model name"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer sk-test-very-secret-123"))
    );
}

/// Runs `yaml` with agents pointed at a scripted server playing `replies`.
async fn run_scripted(yaml: &str, replies: Vec<Reply>) -> common::Run {
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("server");
    let f = Fixture::new(yaml);
    let (_f, run) = f.run_at(server.base_url()).await;
    run
}

const LOOPING_AGENT: &str = r#"
agents:
  - name: looper
    tools: [list_dir]
    max_turns: 2
plan:
  - agent: looper
    prompt: Look around.
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_uses_up_its_turns_is_a_failed_step_not_a_broken_pipeline() {
    let calls = (0..3)
        .map(|_| Reply::tool_call("list_dir", json!({})))
        .collect();
    let run = run_scripted(LOOPING_AGENT, calls).await;
    run.expect_code(1);
    assert!(
        run.stdout().contains("limit of 2 steps"),
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_fails_is_an_infrastructure_error() {
    let errors = (0..6).map(|_| Reply::status(401).body("bad key")).collect();
    let run = run_scripted(LOOPING_AGENT, errors).await;
    run.expect_code(2);
    let all = format!("{}{}", run.stdout(), run.stderr());
    assert!(all.contains("401"), "{all}");
}
