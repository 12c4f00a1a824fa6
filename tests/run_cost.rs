//! Tokens and cost counted everywhere (issue 40): a `fix:` agent's in its task's and its
//! run's totals (`runs --cost` and the API), and a run whose agent step came from the
//! cache at the cost recorded when it ran, shown as replayed, unpriced when its model is.

use crate::common;

use common::Fixture;
use common::server::{Server, get};
use serde_json::Value;
use treadle_scripted::{Reply, Script, ScriptedServer};

const PRICES: &str = "prices:\n  qwen2.5-coder-0.5b: { prompt: 1.0, completion: 2.0 }\n";

/// A task that fails until its fixer writes `config.json`.
const FIXED: &str = "agents:\n  - name: fixer\n    tools: [write_file]\njobs:\n  - name: build\n    plan:\n      - task: check\n        run: test -f config.json\n        fix: fixer\n";

/// One agent step.
const ONE_AGENT: &str = "agents:\n  - name: a\njobs:\n  - name: j\n    plan:\n      - agent: a\n        name: first\n        prompt: say one thing\n";

/// `treadle run` against `server`, on a blocking thread so the server keeps answering.
async fn run(f: Fixture, server: &ScriptedServer) -> (Fixture, common::Run) {
    let url = server.base_url().to_string();
    tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
}

/// The row of run `id` in `treadle runs --cost`.
fn row(table: &str, id: &str) -> String {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or("")
        .to_owned()
}

/// Run `id` as the API shows it, from a server started on the fixture.
async fn api_run(f: &Fixture, id: u64) -> Value {
    let s = Server::start(f.path(), &[], &[]);
    let (code, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
    assert_eq!(code, 200, "{run}");
    run
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fix_agent_s_tokens_and_cost_are_in_its_task_and_its_run() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "write_file",
            serde_json::json!({"path": "config.json", "content": "{}"}),
        )
        .usage(300, 20),
        Reply::text("Created config.json.").usage(400, 30),
    ]))
    .await
    .expect("server");
    let (f, first) = run(Fixture::new(&format!("{PRICES}{FIXED}")), &server).await;
    first.expect_code(0);
    let runs = f.treadle(&["runs", "--cost"]);
    runs.expect_code(0);
    let runs = runs.stdout();
    // 700 prompt tokens at $1/M and 50 completion tokens at $2/M: $0.0008.
    let one = row(&runs, "1");
    assert!(
        one.contains(" 700 ") && one.contains(" 50 ") && one.contains("$0.0008"),
        "the fixer's tokens are not in the run's total:\n{runs}"
    );
    let steps = f.treadle(&["runs", "--cost", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.starts_with("check") && l.contains(" 700 ")),
        "{steps}"
    );
    let api = api_run(&f, 1).await;
    assert_eq!(api["tokens"], 750, "{api}");
    assert!(
        (api["cost_usd"].as_f64().unwrap_or(0.0) - 0.0008).abs() < 1e-9,
        "{api}"
    );
    assert_eq!(api["steps"][0]["tokens"], 750, "{api}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_all_cached_run_costs_what_its_steps_recorded_shown_as_replayed() {
    let server = ScriptedServer::start(Script::new([Reply::text("answer").usage(40, 20)]))
        .await
        .expect("server");
    let (f, first) = run(Fixture::new(&format!("{PRICES}{ONE_AGENT}")), &server).await;
    first.expect_code(0);
    let (f, second) = run(f, &server).await;
    second.expect_code(0);
    assert!(second.stdout().contains("↺ first"), "{}", second.stdout());
    assert_eq!(server.requests().len(), 1, "the second run asked the model");
    let runs = f.treadle(&["runs", "--cost"]).stdout();
    let (one, two) = (row(&runs, "1"), row(&runs, "2"));
    // Run 1 spent it; run 2 shows the same cost, all of it replayed.
    assert!(
        one.contains("$0.0001") && one.trim_end().ends_with('-'),
        "{runs}"
    );
    assert!(
        two.contains(" 40 ") && two.matches("$0.0001").count() == 2,
        "the replayed step's recorded cost is not shown as replayed:\n{runs}"
    );
    let api = api_run(&f, 2).await;
    assert_eq!(api["tokens"], 60, "{api}");
    assert_eq!(api["replayed_tokens"], 60, "{api}");
    assert!(api["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "{api}");
    assert_eq!(api["steps"][0]["cached"], true, "{api}");
    assert_eq!(api["steps"][0]["tokens"], 60, "{api}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_all_cached_run_on_an_unpriced_model_is_unpriced_never_zero() {
    let server = ScriptedServer::start(Script::new([Reply::text("answer").usage(40, 20)]))
        .await
        .expect("server");
    let (f, first) = run(Fixture::new(ONE_AGENT), &server).await;
    first.expect_code(0);
    let (f, second) = run(f, &server).await;
    second.expect_code(0);
    let runs = f.treadle(&["runs", "--cost"]).stdout();
    let two = row(&runs, "2");
    assert!(
        two.contains("unpriced") && !two.contains('$'),
        "an all-cached unpriced run is not unpriced:\n{runs}"
    );
    let api = api_run(&f, 2).await;
    assert_eq!(api["cost_usd"], Value::Null, "{api}");
    assert_eq!(api["steps"][0]["cost_usd"], Value::Null, "{api}");
    assert_eq!(api["tokens"], 60, "{api}");
}

/// A model outage after one answered round: the step errors (`model_outage`, exit code
/// 2), and its record keeps what that round spent (its usage, one model call) and how the
/// turn ended, so the run's totals count it; the transcript keeps the round. (Until the
/// outage was read from the step's outcome, the step ended before its record was written:
/// no usage, no tail, the run's tokens short.)
#[tokio::test(flavor = "multi_thread")]
async fn a_model_outage_keeps_its_steps_spending_and_partial_record() {
    let first = Reply::text("Looking around first.")
        .with_tool_calls([treadle_scripted::ToolCall::new(
            "list_dir",
            serde_json::json!({"path": "."}),
        )])
        .usage(300, 20);
    let server = ScriptedServer::start(Script::new([first, Reply::status(500)]))
        .await
        .expect("server");
    let yaml = "agents:\n  - name: a\n    tools: [list_dir]\njobs:\n  - name: j\n    plan:\n      - agent: a\n        name: first\n        attempts: 1\n        prompt: look then answer\n";
    let (f, ran) = run(Fixture::new(&format!("{PRICES}{yaml}")), &server).await;
    ran.expect_code(2);
    assert_eq!(server.request_count(), 2, "{}", ran.stdout());
    let api = api_run(&f, 1).await;
    let step = &api["steps"][0];
    assert_eq!(step["failure"], "model_outage", "{api}");
    assert_eq!(step["tokens"], 320, "the answered round's tokens:\n{api}");
    assert_eq!(step["usage"]["model_calls"], 1, "{api}");
    assert!(
        step["output_tail"]
            .as_str()
            .is_some_and(|t| t.contains("HTTP 500")),
        "the record keeps how the turn ended:\n{api}"
    );
    assert_eq!(api["tokens"], 320, "{api}");
    let runs = f.treadle(&["runs", "--cost"]).stdout();
    assert!(row(&runs, "1").contains(" 300 "), "{runs}");
    let shown = f.treadle(&["runs", "--show", "1"]).stdout();
    assert!(
        shown.contains("→ list_dir"),
        "the round before it:\n{shown}"
    );
}
