//! Every model call's tokens counted (issue 40), one path at a time: a `fallback:` that
//! takes over a step mid-way, an `ensemble:` (members and judge), and a sub-agent on a
//! model of its own. Each is run against scripted model servers over loopback whose
//! answers carry known usage, and the sum of the calls served must be the step's record,
//! the run's total in `treadle runs --cost` and the API's `tokens`/`cost_usd` (which the
//! page shows as they are: `web/assets/run.js`, `steps.js`), each model's calls at its own
//! price.

use crate::common;

use common::Fixture;
use common::server::{Server, get};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Dollars per million tokens: each model its own price, so a call priced as another
/// model's shows.
const PRICES: &str = "prices:\n  primary-model: { prompt: 1.0, completion: 2.0 }\n  equivalent-model: { prompt: 3.0, completion: 4.0 }\n  child-model: { prompt: 5.0, completion: 7.0 }\n  qwen2.5-coder-0.5b: { prompt: 1.0, completion: 2.0 }\n";

/// A model call: (prompt, completion) tokens at (prompt, completion) dollars per million.
type Call = ((u64, u64), (f64, f64));

/// What calls cost.
fn usd(calls: &[Call]) -> f64 {
    calls
        .iter()
        .map(|((p, c), (pp, cp))| (*p as f64 * pp + *c as f64 * cp) / 1e6)
        .sum()
}

/// Runs `treadle run` in `f` (agents without an endpoint of their own at `url`).
async fn run(f: Fixture, url: &str) -> (Fixture, common::Run) {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
}

/// The figures of run 1 everywhere they are shown: `runs --cost` (prompt, completion,
/// cost), the API's run and its steps; fails unless each is `prompt`, `completion` and
/// `usd`.
async fn counted_everywhere(f: &Fixture, prompt: u64, completion: u64, usd: f64) {
    let table = f.treadle(&["runs", "--cost"]).stdout();
    let row: Vec<String> = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1"))
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    // run, job, status, prompt, completion, cached, cost, replayed
    assert_eq!(
        (row.get(3), row.get(4)),
        (Some(&prompt.to_string()), Some(&completion.to_string())),
        "tokens in `runs --cost`:\n{table}"
    );
    assert_eq!(
        row.get(6).map(String::as_str),
        Some(format!("${usd:.4}").as_str()),
        "cost in `runs --cost`:\n{table}"
    );
    let s = Server::start(f.path(), &[], &[]);
    let (code, api) = get(&s, "/api/v1/runs/1").await;
    assert_eq!(code, 200, "{api}");
    assert_eq!(api["tokens"], prompt + completion, "{api}");
    let cost = api["cost_usd"].as_f64().unwrap_or(-1.0);
    assert!(
        (cost - usd).abs() < 1e-12,
        "cost_usd {cost}, not {usd}: {api}"
    );
    // The steps' own figures add up to the run's (a block's children are its steps).
    let mut steps_tokens = 0;
    let mut stack: Vec<Value> = api["steps"].as_array().cloned().unwrap_or_default();
    while let Some(step) = stack.pop() {
        steps_tokens += step["tokens"].as_u64().unwrap_or(0);
        stack.extend(step["children"].as_array().cloned().unwrap_or_default());
    }
    assert_eq!(steps_tokens, prompt + completion, "{api}");
}

const FALLBACK: &str = r#"
agents:
- name: writer
  tools: [list_dir]
  source: { endpoint: "{PRIMARY}", model: primary-model }
  fallback:
  - source: { endpoint: "{SECOND}", model: equivalent-model }
jobs:
- name: publish
  plan:
  - agent: writer
    prompt: "Write the announcement."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_fallback_that_takes_over_mid_step_counts_both_models_calls_each_at_its_price() {
    // The primary makes one call, then fails (HTTP 500) and the fallback goes on.
    let primary = ScriptedServer::start(Script::new([Reply::tool_call(
        "list_dir",
        json!({"path": "."}),
    )
    .usage(100, 10)]))
    .await
    .expect("primary");
    let second = ScriptedServer::start(Script::new([
        Reply::text("Announcement written").usage(200, 20)
    ]))
    .await
    .expect("fallback");
    let yaml = FALLBACK
        .replace("{PRIMARY}", primary.base_url())
        .replace("{SECOND}", second.base_url());
    let (f, done) = run(Fixture::new(&format!("{PRICES}{yaml}")), second.base_url()).await;
    done.expect_code(0);
    assert!(
        done.stdout().contains("agent.failover"),
        "{}",
        done.stdout()
    );
    assert_eq!(second.requests().len(), 1);
    let usd = usd(&[((100, 10), (1.0, 2.0)), ((200, 20), (3.0, 4.0))]);
    counted_everywhere(&f, 300, 30, usd).await;
}

const ENSEMBLE: &str = r#"
agents:
- name: reviewer-a
- name: reviewer-b
- name: reviewer-c
- name: chief
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts: [reject, approve]
      decide: chief
      agents:
      - {agent: reviewer-a, prompt: "Review the diff for correctness."}
      - {agent: reviewer-b, prompt: "Review the diff for style."}
      - {agent: reviewer-c, prompt: "Review the diff for security."}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_ensemble_counts_every_member_s_and_the_judge_s_calls() {
    // Each member and the judge: a verdict call, then a note after it.
    let server = ScriptedServer::start(Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if messages.iter().any(|m| m["role"] == "tool") {
            return Reply::text("noted").usage(30, 3);
        }
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})).usage(100, 10)
    }))
    .await
    .expect("server");
    let (f, done) = run(
        Fixture::new(&format!("{PRICES}{ENSEMBLE}")),
        server.base_url(),
    )
    .await;
    done.expect_code(0);
    let calls = server.requests().len() as u64;
    assert_eq!(calls, 8, "three members and a judge, two calls each");
    let usd = usd(&[((4 * 130, 4 * 13), (1.0, 2.0))]);
    counted_everywhere(&f, 4 * 130, 4 * 13, usd).await;
}

const DELEGATION: &str = r#"
agents:
  - name: summarizer
    source: { endpoint: "{URL}", model: child-model }
    system: You summarize files.
    tools: [read_file]
  - name: lead
    system: You lead.
    tools:
      - agent: summarizer
jobs:
  - name: digest
    plan:
      - task: fetch
        outputs: [notes]
        run: echo 'a long account of the outage' > notes/log.txt
      - agent: lead
        inputs: [notes]
        prompt: Have your summarizer condense notes/log.txt, then report.
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_agent_s_calls_are_its_parent_step_s_at_its_own_model_s_price() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("summarizer", json!({"request": "Condense notes/log.txt."}))
            .usage(100, 10),
        Reply::tool_call("read_file", json!({"path": "notes/log.txt"})).usage(50, 5),
        Reply::text("The log says there was an outage.").usage(60, 8),
        Reply::text("Report: there was an outage.").usage(120, 6),
    ]))
    .await
    .expect("server");
    let yaml = DELEGATION.replace("{URL}", server.base_url());
    let (f, done) = run(Fixture::new(&format!("{PRICES}{yaml}")), server.base_url()).await;
    done.expect_code(0);
    assert_eq!(server.requests().len(), 4);
    let usd = usd(&[
        ((100 + 120, 10 + 6), (1.0, 2.0)),
        ((50 + 60, 5 + 8), (5.0, 7.0)),
    ]);
    counted_everywhere(&f, 330, 29, usd).await;
}
