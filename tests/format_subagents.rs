//! Sub-agents (`tools: - agent: NAME`) beyond their tokens: one granted `ask_human` asks a
//! person through the calling step (answered with `treadle answer`), one gets its share
//! of the caller's dollars, and under `--replay-model` its model calls come from the tape
//! like the caller's. All against the scripted server.

use crate::common;

use common::{Fixture, Run, dead_url, spawn_run, wait_until_asked};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

fn system_of(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The content of the last tool result the request carries, if any.
fn last_tool_result(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
}

/// The lead delegates to the painter, which asks a person which color, then both report.
fn painting(body: &Value) -> Reply {
    let result = last_tool_result(body);
    if system_of(body).contains("You paint.") {
        return match result {
            Some(color) => Reply::text(format!("painted {color}")),
            None => Reply::tool_calls([ToolCall::new(
                "ask_human",
                json!({ "question": "Which color?", "choices": ["red", "blue"] }),
            )]),
        };
    }
    match result {
        Some(report) => Reply::text(format!("lead says: {report}")),
        None => Reply::tool_call("painter", json!({ "request": "Paint the shed." })),
    }
}

const PAINTING: &str = r#"
agents:
  - name: painter
    system: You paint.
    tools: [ask_human]
  - name: lead
    system: You lead.
    tools:
      - agent: painter
jobs:
  - name: paint
    plan:
      - agent: lead
        prompt: Have the painter paint the shed.
        timeout: 60s
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_asks_a_person_through_the_calling_step() {
    let server = ScriptedServer::start(Script::from_fn(painting))
        .await
        .expect("server");
    let url = server.base_url().to_owned();
    let f = Fixture::new(PAINTING);
    let (f, run, waiting) = tokio::task::spawn_blocking(move || {
        let child = spawn_run(&f, &[("TREADLE_LOCAL_URL", &url)]);
        wait_until_asked(&f, "lead");
        let waiting = f.treadle(&["approvals"]).stdout();
        f.treadle(&["answer", "1", "lead", "--json", "\"blue\""])
            .expect_code(0);
        (f, Run(child.wait_with_output().expect("wait")), waiting)
    })
    .await
    .expect("thread");
    run.expect_code(0);
    assert!(waiting.contains("[sub-agent painter]"), "{waiting}");
    assert!(
        run.stdout().contains("lead says: painted blue"),
        "{}",
        run.stdout()
    );
    drop(f);
}

const FUNDED: &str = r#"
prices:
  local/qwen2.5-coder-0.5b: { prompt: 1000, completion: 1000 }
agents:
  - name: helper
    system: You help.
    tools: [read_file]
  - name: lead
    system: You lead.
    budget: { usd: 1.0 }
    delegate_budget_percent: 10
    tools:
      - agent: helper
jobs:
  - name: j
    plan:
      - agent: lead
        prompt: Ask your helper.
"#;

/// At $1000 per million tokens a token costs $0.001: the helper's first call ($0.15)
/// spends more than its tenth of the lead's dollar ($0.10).
fn funded(body: &Value) -> Reply {
    let result = last_tool_result(body);
    if system_of(body).contains("You help.") {
        return Reply::tool_call("read_file", json!({ "path": "notes.txt" })).usage(100, 50);
    }
    match result {
        Some(report) => Reply::text(format!("finished: {report}")).usage(10, 10),
        None => Reply::tool_call("helper", json!({ "request": "Read notes.txt." })).usage(100, 0),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_agent_spends_only_its_share_of_the_callers_dollars() {
    let server = ScriptedServer::start(Script::from_fn(funded))
        .await
        .expect("server");
    let (_f, run) = Fixture::new(FUNDED).run_at(server.base_url()).await;
    run.expect_code(0);
    let requests = server.requests();
    // The lead, the helper's one affordable call, the lead again: the helper's second
    // call was never made.
    assert_eq!(requests.len(), 3, "{}", run.stdout());
    let told = last_tool_result(&requests[2].body).unwrap_or_default();
    assert!(
        told.contains("dollar budget spent ($0.1500 of $0.1000)"),
        "{told}"
    );
}

const DIGEST: &str = r#"
agents:
  - name: summarizer
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
        assert:
          stdout: "Report: there was an outage."
"#;

async fn treadle(args: Vec<String>, url: String) -> Run {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Fixture::new(DIGEST).treadle_env(&args, &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_agents_calls_replay_from_the_tape_without_an_endpoint() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("summarizer", json!({"request": "Condense notes/log.txt."})),
        Reply::tool_call("read_file", json!({"path": "notes/log.txt"})),
        Reply::text("The log says there was an outage."),
        Reply::text("Report: there was an outage."),
    ]))
    .await
    .expect("server");
    let tape = tempfile::tempdir().expect("tape dir");
    let dir = tape.path().display().to_string();
    let args = |flag: &str| vec!["run".to_owned(), flag.to_owned(), dir.clone()];
    let recorded = treadle(args("--record"), server.base_url().to_owned()).await;
    recorded.expect_code(0);
    assert_eq!(server.request_count(), 4);
    // The sub-agent's two calls are on a tape of their own, beside the step's two.
    let calls = |folder: &str| {
        std::fs::read_dir(tape.path().join("digest").join(folder))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".request.json"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!((calls("lead"), calls("lead.summarizer")), (2, 2));
    // Replayed with nothing listening: every call, the sub-agent's too, is the tape's.
    let replayed = treadle(args("--replay-model"), dead_url()).await;
    replayed.expect_code(0);
    assert!(
        replayed.stdout().contains("Report: there was an outage."),
        "{}",
        replayed.stdout()
    );
    assert_eq!(server.request_count(), 4, "the replay reached the server");
}
