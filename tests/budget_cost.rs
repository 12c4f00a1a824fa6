//! Token budgets on a job and on an agent, end to end against the scripted server, and
//! `treadle runs --cost`.

use crate::common;

use common::Fixture;
use treadle_scripted::{Reply, Script, ScriptedServer};

async fn run_with(server: &ScriptedServer, yaml: &str) -> (Fixture, common::Run) {
    let f = Fixture::new(yaml);
    let url = server.base_url().to_string();
    tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_job_budget_stops_the_next_agent_step_before_its_model_call() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("first answer").usage(40, 20),
        Reply::text("must never be asked for").usage(1, 1),
    ]))
    .await
    .expect("server");
    let yaml = "prices:\n  qwen2.5-coder-0.5b: { prompt: 1.0, completion: 2.0 }\nagents:\n  - name: a\njobs:\n  - name: j\n    budget: { tokens: 50 }\n    plan:\n      - agent: a\n        name: first\n        prompt: say one thing\n      - agent: a\n        name: second\n        prompt: say another\n";
    let (f, run) = run_with(&server, yaml).await;
    run.expect_code(1);
    let out = run.stdout();
    assert!(
        out.contains("job token budget spent (60 of 50 tokens)"),
        "{out}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "the second step called the model"
    );
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("second") && l.contains("failed") && l.contains("budget")),
        "{steps}"
    );
    let cost = f.treadle(&["runs", "--cost", "--steps", "1"]);
    cost.expect_code(0);
    let cost = cost.stdout();
    // 40 prompt tokens at $1/M and 20 completion tokens at $2/M.
    let first = cost.lines().find(|l| l.starts_with("first")).unwrap_or("");
    assert!(
        first.contains("40") && first.contains("20") && first.contains("$0.0001"),
        "{cost}"
    );
    let runs = f.treadle(&["runs", "--cost"]).stdout();
    assert!(
        runs.lines()
            .any(|l| l.contains(" j ") && l.contains("$0.0001")),
        "{runs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_budget_stops_its_step_and_unpriced_usage_says_so() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("list_dir", serde_json::json!({"path": "."})).usage(20, 5),
        Reply::text("must never be asked for"),
    ]))
    .await
    .expect("server");
    let yaml = "agents:\n  - name: a\n    tools: [list_dir]\n    budget: { tokens: 10 }\njobs:\n  - name: j\n    plan:\n      - agent: a\n        prompt: look around\n";
    let (f, run) = run_with(&server, yaml).await;
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("step token budget spent (25 of 10 tokens)"),
        "{}",
        run.stdout()
    );
    assert_eq!(server.requests().len(), 1);
    let cost = f.treadle(&["runs", "--cost", "--steps", "1"]).stdout();
    assert!(
        cost.lines()
            .any(|l| l.starts_with('a') && l.contains("25") || l.contains("unpriced")),
        "{cost}"
    );
    assert!(cost.contains("unpriced"), "{cost}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prices_use_the_model_the_server_reports_serving() {
    // The pipeline asks for an alias; the server says which model answered, and only that
    // model has a price.
    let server = ScriptedServer::start(Script::new([Reply::text("done")
        .usage(1_000_000, 0)
        .served_model("big-model-2025")]))
    .await
    .expect("server");
    let yaml = "prices:\n  big-model-2025: { prompt: 3.0, completion: 3.0 }\nagents:\n  - name: a\njobs:\n  - name: j\n    plan:\n      - agent: a\n        name: first\n        prompt: say one thing\n";
    let (f, run) = run_with(&server, yaml).await;
    run.expect_code(0);
    let cost = f.treadle(&["runs", "--cost", "--steps", "1"]).stdout();
    let first = cost.lines().find(|l| l.starts_with("first")).unwrap_or("");
    assert!(
        first.contains("big-model-2025") && first.contains("$3.0000"),
        "{cost}"
    );
}
