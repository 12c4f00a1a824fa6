//! The library's controls in pipelines, against the scripted server: a verdict below
//! `min_confidence:` escalating to a person or a stronger agent, a `permissions:` rule that
//! asks (answered from another `treadle` process), `output_schema:` with its one retry, and
//! dollar budgets.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Fixture, Run};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Starts `treadle run` in the background against `url` (stdin is not a terminal).
fn spawn_run(f: &Fixture, url: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("TREADLE_LOCAL_URL", url)
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn treadle run")
}

async fn finish(child: Child) -> Run {
    tokio::task::spawn_blocking(move || Run(child.wait_with_output().expect("wait for run")))
        .await
        .expect("the run's thread")
}

/// Runs `treadle ARGS` in the fixture on a blocking thread (the server keeps answering).
async fn treadle(f: &Fixture, args: &[&str]) -> Run {
    let (dir, args): (std::path::PathBuf, Vec<String>) = (
        f.path().to_path_buf(),
        args.iter().map(|a| (*a).to_owned()).collect(),
    );
    tokio::task::spawn_blocking(move || {
        Run(Command::new(env!("CARGO_BIN_EXE_treadle"))
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("run treadle"))
    })
    .await
    .expect("thread")
}

const REVIEW: &str = "agents:\n  - name: reviewer\n    tools: [read_file]\nESCALATE_AGENTjobs:\n  - name: j\n    plan:\n      - agent: reviewer\n        name: review\n        prompt: Decide.\n        timeout: 60s\n        verdicts: [approve, reject]\n        min_confidence: 0.8\nESCALATE_TO";

fn review(escalate_to: Option<&str>) -> String {
    match escalate_to {
        Some(agent) => REVIEW
            .replace(
                "ESCALATE_AGENT",
                &format!("  - name: {agent}\n    source: {{ model: local/strong-model }}\n    tools: [read_file]\n"),
            )
            .replace("ESCALATE_TO", &format!("        escalate_to: {agent}\n")),
        None => REVIEW.replace("ESCALATE_AGENT", "").replace("ESCALATE_TO", ""),
    }
}

fn verdict(confidence: f64) -> Reply {
    Reply::tool_call(
        "verdict",
        json!({"verdict": "approve", "reason": "the diff looks small", "confidence": confidence}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_low_confidence_verdict_escalates_to_a_person_who_approves() {
    let server = ScriptedServer::start(Script::new([verdict(0.4), Reply::text("Approved.")]))
        .await
        .expect("server");
    let f = Fixture::new(&review(None));
    let child = spawn_run(&f, server.base_url());
    let dir = f.path().to_path_buf();
    let shown = tokio::task::spawn_blocking(move || Probe(dir).wait("confidence 0.40"))
        .await
        .unwrap();
    // The person sees the verdict, its confidence and the model's note.
    assert!(shown.contains("chose `approve`"), "{shown}");
    assert!(shown.contains("the diff looks small"), "{shown}");
    treadle(&f, &["approve", "1", "0"]).await.expect_code(0);
    let run = finish(child).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("escalation approved by"), "{out}");
    // Recorded in the run: the approval, and the escalation with the step.
    let steps = treadle(&f, &["runs", "--steps", "1"]).await.stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("review") && l.contains("succeeded")),
        "{steps}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_escalation_fails_the_step() {
    let server = ScriptedServer::start(Script::new([verdict(0.2), Reply::text("Approved.")]))
        .await
        .expect("server");
    let f = Fixture::new(&review(None));
    let child = spawn_run(&f, server.base_url());
    let dir = f.path().to_path_buf();
    tokio::task::spawn_blocking(move || Probe(dir).wait("confidence 0.20"))
        .await
        .unwrap();
    treadle(&f, &["reject", "1", "review"]).await.expect_code(0);
    let run = finish(child).await;
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("escalated to a person and rejected by"),
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_low_confidence_verdict_goes_to_the_stronger_agent() {
    let server = ScriptedServer::start(Script::new([
        verdict(0.3),
        Reply::text("Probably fine."),
        verdict(0.95),
        Reply::text("Fine."),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(&review(Some("senior")));
    let child = spawn_run(&f, server.base_url());
    let run = finish(child).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("agent `senior` decides again"), "{out}");
    let models: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        models.last().map(String::as_str),
        Some("strong-model"),
        "{models:?}"
    );
    assert_ne!(models.first().map(String::as_str), Some("strong-model"));
}

const ASKING: &str = "agents:\n  - name: writer\n    tools: [write_file, read_file]\n    permissions:\n      rules:\n        - { tool: read_file, action: allow }\n        - { tool: write_file, matches: { path: \"^notes/\" }, action: ask }\n      default: { deny: \"not on the list\" }\njobs:\n  - name: j\n    plan:\n      - agent: writer\n        name: write\n        prompt: Write the note.\n        timeout: 60s\n        outputs: [notes]\n      - task: show\n        inputs: [write]\n        run: cat notes/n.md 2>/dev/null || echo no-note\n";

fn writes() -> Script {
    Script::new([
        Reply::tool_call(
            "write_file",
            json!({"path": "notes/n.md", "content": "HELLO-NOTE"}),
        ),
        Reply::text("Done."),
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permission_ask_is_answered_from_another_process() {
    let server = ScriptedServer::start(writes()).await.expect("server");
    let yaml = ASKING.replace("inputs: [write]", "inputs: [notes]");
    let f = Fixture::new(&yaml);
    let child = spawn_run(&f, server.base_url());
    let dir = f.path().to_path_buf();
    let shown = tokio::task::spawn_blocking(move || Probe(dir).wait("write_file"))
        .await
        .unwrap();
    assert!(shown.contains("notes/n.md"), "{shown}");
    treadle(&f, &["approve", "1", "write"]).await.expect_code(0);
    let run = finish(child).await;
    run.expect_code(0);
    assert!(run.stdout().contains("HELLO-NOTE"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_permission_is_the_tool_result_the_model_reads() {
    let server = ScriptedServer::start(writes()).await.expect("server");
    let yaml = ASKING.replace("inputs: [write]", "inputs: [notes]");
    let f = Fixture::new(&yaml);
    let child = spawn_run(&f, server.base_url());
    let dir = f.path().to_path_buf();
    tokio::task::spawn_blocking(move || Probe(dir).wait("write_file"))
        .await
        .unwrap();
    treadle(&f, &["reject", "1", "write"]).await.expect_code(0);
    let run = finish(child).await;
    run.expect_code(0);
    assert!(run.stdout().contains("no-note"), "{}", run.stdout());
    let second = server
        .requests()
        .get(1)
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(second.contains("refused by"), "{second}");
}

const TYPED: &str = "agents:\n  - name: a\n    tools: [read_file]\njobs:\n  - name: j\n    plan:\n      - agent: a\n        name: summarize\n        prompt: Summarize.\n        outputs: [summary]\n        output_schema:\n          output: summary\n          schema:\n            type: object\n            required: [title, score]\n            properties:\n              title: { type: string }\n              score: { type: integer }\n      - task: show\n        inputs: [summary]\n        run: cat summary/output.json\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_typed_output_failing_twice_fails_the_step_with_the_reason() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("{\"title\": \"x\"}"),
        Reply::text("{\"title\": \"x\", \"score\": \"high\"}"),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(TYPED).run_at(server.base_url()).await;
    run.expect_code(1);
    let out = run.stdout();
    assert!(
        out.contains("does not match `output_schema:` after one retry"),
        "{out}"
    );
    assert!(out.contains("/score"), "{out}");
    // The retry told the model why its first answer did not fit.
    let retry = server.requests()[1].body.to_string();
    assert!(
        retry.contains("\\\"score\\\" is a required property"),
        "{retry}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typed_output_is_written_as_json_to_its_output() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("not json"),
        Reply::text("```json\n{\"title\": \"Notes\", \"score\": 4}\n```"),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(TYPED).run_at(server.base_url()).await;
    run.expect_code(0);
    assert!(run.stdout().contains("\"score\": 4"), "{}", run.stdout());
}

const PRICED: &str = "prices:\n  local/qwen2.5-coder-0.5b: { prompt: 1000, completion: 0 }\nagents:\n  - name: a\n    tools: [read_file]\n    budget: { dollars: 1.5 }\njobs:\n  - name: j\n    plan:\n      - agent: a\n        prompt: Read.\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_dollar_budget_refuses_the_call_it_cannot_afford() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "a"})).usage(1000, 10),
        Reply::tool_call("read_file", json!({"path": "b"})).usage(1000, 10),
        Reply::text("done").usage(1000, 10),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(PRICED).run_at(server.base_url()).await;
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("step dollar budget spent ($2.0000 of $1.5000)"),
        "{}",
        run.stdout()
    );
    assert_eq!(server.request_count(), 2);
}

#[test]
fn a_dollar_budget_for_an_unpriced_model_is_a_load_error() {
    let f = Fixture::new(&PRICED.replace(
        "prices:\n  local/qwen2.5-coder-0.5b: { prompt: 1000, completion: 0 }\n",
        "",
    ));
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(err.contains("treadle.yml:"), "{err}");
    assert!(err.contains("has no price"), "{err}");
    assert!(err.contains("prices:"), "{err}");
}

/// Polls `treadle approvals` in a pipeline directory.
struct Probe(std::path::PathBuf);

impl Probe {
    fn wait(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let out = Command::new(env!("CARGO_BIN_EXE_treadle"))
                .arg("approvals")
                .current_dir(&self.0)
                .output()
                .expect("treadle approvals");
            let text_out = String::from_utf8_lossy(&out.stdout).into_owned();
            if text_out.contains(text) {
                return text_out;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never asked {text:?}: {text_out}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_is_answered_through_the_server_api() {
    use common::server::{Server, get, post};
    let model = ScriptedServer::start(Script::new([verdict(0.5), Reply::text("Approved.")]))
        .await
        .expect("server");
    let f = Fixture::new(&review(None));
    let s = Server::start(f.path(), &[], &[("TREADLE_LOCAL_URL", model.base_url())]);
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let start = Instant::now();
    let waiting = loop {
        let (_, list) = get(&s, "/api/v1/approvals?state=pending").await;
        if let Some(first) = list.as_array().and_then(|l| l.first()) {
            break first.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never pending");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.contains("confidence 0.50"), "{waiting}");
    let path = format!("/api/v1/runs/{id}/approvals/{}", waiting["seq"]);
    let (code, decided) = post(&s, &path, json!({"decision": "approve", "by": "web"})).await;
    assert_eq!(code, 200, "{decided}");
    let start = Instant::now();
    loop {
        let (_, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never ended");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
