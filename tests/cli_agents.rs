//! CLI-backed agents (`@claude/MODEL`) with the real claude CLI, driven by the scripted
//! server's Anthropic Messages endpoint over loopback: a read, a write caught by
//! `assert: files:`, the nudge that makes the CLI write a missing file, a tool that was not
//! granted (absent), a custom tool and the verdict through the MCP bridge, a dollar budget
//! stopping the step, the live transcript in Chromium, the CLI examples of docs/agents.md,
//! and one run against the bundled local model.
//!
//! The CLI is found through `TREADLE_CLAUDE_BIN`, which `scripts/test` sets after
//! installing it with npm (and where its absence is a failure). In a plain `cargo test`
//! without it, each test says so and skips.

use crate::browser::Browser;
use crate::common::cli::{CLAUDE, scripted};
use crate::common::server::Server;
use crate::common::{Fixture, Run};

use std::time::Duration;

use serde_json::{Value, json};
use treadle_scripted::{RecordedRequest, Reply, Script, ScriptedServer, ToolCall};

/// The variable holding the scripted endpoint's (meaningless) key: the CLI needs a key.
const KEY_ENV: &str = CLAUDE.key_env;

/// The claude CLI to run, or `None` (said on stderr) when it is not installed.
pub fn claude(test: &str) -> Option<String> {
    CLAUDE.find(test)
}

/// A one-agent pipeline whose agent is the claude CLI aimed at `url`, with `tools`,
/// `agent_extra` under the agent, and the job's `plan` (YAML, indented by the caller).
pub fn pipeline(url: &str, tools: &str, agent_extra: &str, plan: &str) -> String {
    format!(
        "agents:\n  - name: coder\n    source:\n      model: \"@claude/sonnet\"\n      endpoint: {url}\n      api_key_env: {KEY_ENV}\n    tools: {tools}\n{agent_extra}jobs:\n  - name: main\n    plan:\n{plan}"
    )
}

/// `treadle ARGS` in the fixture with the CLI and the key.
pub async fn treadle(f: &Fixture, bin: &str, args: &[&str]) -> Run {
    CLAUDE.treadle(f, bin, args).await
}

/// The names of the tools a request offered.
fn offered(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// The `tool_result` blocks of a request's conversation.
pub fn results(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .cloned()
        .collect()
}

/// The text of a tool result (a string, or its text blocks).
pub fn result_text(block: &Value) -> String {
    match &block["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

const NOTES: &str = "      - task: prepare\n        outputs: [notes]\n        run: echo 'the launch is at dawn' > notes/plan.txt\n";

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_reads_a_file_of_its_step_and_the_transcript_has_the_call() {
    let Some(bin) = claude("the_cli_reads_a_file_of_its_step_and_the_transcript_has_the_call")
    else {
        return;
    };
    let server = scripted([
        Reply::tool_call("Read", json!({"file_path": "notes/plan.txt"})).usage(200, 10),
        Reply::text("The launch is at dawn.").usage(240, 8),
    ])
    .await;
    let plan = format!(
        "{NOTES}      - agent: coder\n        inputs: [notes]\n        prompt: When is the launch? Read notes/plan.txt.\n        assert:\n          stdout: at dawn\n          tool_calls:\n            - name: read_file\n"
    );
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[read_file]",
        "",
        &plan,
    ));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("scripted-key"));
    // The file's content went back to the model as the Read's result.
    let read = results(&requests[1]);
    assert!(
        read.iter()
            .any(|r| result_text(r).contains("the launch is at dawn")),
        "{read:?}"
    );
    // The transcript shows the call under treadle's name, with its result.
    let out = run.stdout();
    assert!(
        out.contains("\"tool_call\"") && out.contains("read_file"),
        "{out}"
    );
    assert!(out.contains("the launch is at dawn"), "{out}");
    // `runs --cost` counts the CLI's tokens; with no `prices:` they are unpriced: the
    // CLI's own dollar guess is not a price.
    let cost = treadle(&f, &bin, &["runs", "--cost", "--steps", "1"]).await;
    cost.expect_code(0);
    let cost = cost.stdout();
    let line = cost.lines().find(|l| l.starts_with("coder")).unwrap_or("");
    assert!(line.contains("unpriced") && !line.contains('$'), "{cost}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_the_cli_writes_passes_assert_files() {
    let Some(bin) = claude("a_file_the_cli_writes_passes_assert_files") else {
        return;
    };
    let server = scripted([
        Reply::tool_call(
            "Write",
            json!({"file_path": "report/summary.md", "content": "# Summary\nAll good.\n"}),
        ),
        Reply::text("Wrote the summary."),
    ])
    .await;
    let plan = "      - agent: coder\n        outputs: [report]\n        prompt: Write report/summary.md.\n        assert:\n          files: [report/summary.md]\n      - task: check\n        inputs: [report]\n        run: cat report/summary.md\n        assert:\n          stdout: All good.\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[read_file, write_file]",
        "",
        plan,
    ));
    treadle(&f, &bin, &["run"]).await.expect_code(0);
    assert_eq!(server.request_count(), 2);
    // Write was offered, and only what was granted.
    let tools = offered(&server.requests()[0]);
    assert!(
        tools.iter().any(|t| t == "Write") && tools.iter().any(|t| t == "Read"),
        "{tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t == "Bash" || t == "Edit"),
        "{tools:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cli_that_ends_without_its_file_is_woken_with_resume_and_writes_it() {
    let Some(bin) = claude("a_cli_that_ends_without_its_file_is_woken_with_resume_and_writes_it")
    else {
        return;
    };
    let server = scripted([
        // The first run ends without writing anything.
        Reply::text("Done, I think."),
        // Woken again, it writes the file.
        Reply::tool_call(
            "Write",
            json!({"file_path": "out/result.txt", "content": "42\n"}),
        ),
        Reply::text("Now it is written."),
    ])
    .await;
    let plan = "      - agent: coder\n        outputs: [out]\n        prompt: Compute the answer.\n        assert:\n          files: [out/result.txt]\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[write_file]",
        "",
        plan,
    ));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    // The second run continued the same conversation (its first answer is in it), told
    // what was missing.
    let messages = requests[1].body["messages"].to_string();
    assert!(messages.contains("Done, I think."), "{messages}");
    assert!(messages.contains("out/result.txt"), "{messages}");
    assert!(
        run.stdout().contains("--resume") || run.stderr().contains("--resume"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_was_not_granted_is_absent_from_the_cli() {
    let Some(bin) = claude("a_tool_that_was_not_granted_is_absent_from_the_cli") else {
        return;
    };
    let server = scripted([
        Reply::tool_call("Bash", json!({"command": "touch pwned"})),
        Reply::text("I could not run it."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Run touch pwned.\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[read_file]",
        "",
        plan,
    ));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    run.expect_code(0);
    let requests = server.requests();
    let tools = offered(&requests[0]);
    assert!(!tools.iter().any(|t| t == "Bash"), "{tools:?}");
    // The call the model made anyway was refused, and nothing ran.
    let refused = results(&requests[1]);
    assert!(
        refused.iter().all(|r| r["is_error"] == json!(true)),
        "{refused:?}"
    );
    let touched = walk(f.path()).into_iter().any(|p| p.ends_with("pwned"));
    assert!(!touched, "the denied command ran");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_tool_reaches_the_cli_through_the_mcp_bridge() {
    let Some(bin) = claude("a_custom_tool_reaches_the_cli_through_the_mcp_bridge") else {
        return;
    };
    let server = scripted([
        Reply::tool_call("mcp__treadle__greet", json!({"who": "Ada"})),
        Reply::text("Greeted."),
    ])
    .await;
    let tools = "\n      - read_file\n      - name: greet\n        description: Greets someone by name.\n        run: echo hello {{ .args.who }} from the bridge\n";
    let plan = "      - agent: coder\n        prompt: Greet Ada.\n        assert:\n          tool_calls:\n            - name: greet\n              args: { who: Ada }\n";
    let f = Fixture::new(&pipeline(&server.messages_base_url(), tools, "", plan));
    treadle(&f, &bin, &["run"]).await.expect_code(0);
    let requests = server.requests();
    let offered = offered(&requests[0]);
    assert!(
        offered.iter().any(|t| t == "mcp__treadle__greet"),
        "{offered:?}"
    );
    let greeted = results(&requests[1]);
    assert!(
        greeted
            .iter()
            .any(|r| result_text(r).contains("hello Ada from the bridge")),
        "{greeted:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_s_verdict_routes_the_plan() {
    let Some(bin) = claude("the_cli_s_verdict_routes_the_plan") else {
        return;
    };
    let server = scripted([
        Reply::tool_call(
            "mcp__treadle__verdict",
            json!({"verdict": "approve", "reason": "looks right"}),
        ),
        Reply::text("Approved."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Review the change.\n        verdicts:\n          - reject: revise\n          - approve: publish\n      - task: revise\n        run: echo revising\n      - task: publish\n        run: echo shipping\n        assert:\n          stdout: shipping\n    assert:\n      execution: [coder, publish]\n      outcome: succeeded\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[read_file]",
        "",
        plan,
    ));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    assert!(!run.stdout().contains("revising"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dollar_budget_stops_the_cli() {
    let Some(bin) = claude("a_dollar_budget_stops_the_cli") else {
        return;
    };
    // One answer whose output tokens cost far more than the budget: the CLI makes no further
    // model call and the step fails as over budget. Whether claude runs the tool calls of
    // the answer that crossed the budget is its own race (its check is before the next
    // call; at load 9 it ran the write 1 time in 6), so that is not asserted: docs/agents.md
    // says so.
    let server = scripted([
        Reply::tool_call(
            "Write",
            json!({"file_path": "out/big.txt", "content": "expensive\n"}),
        )
        .usage(1000, 500_000),
        Reply::text("never asked for"),
    ])
    .await;
    let agent = "    budget:\n      usd: 0.05\n";
    let plan = "      - agent: coder\n        outputs: [out]\n        prompt: Write out/big.txt.\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[write_file]",
        agent,
        plan,
    ));
    let run = treadle(&f, &bin, &["run"]).await;
    assert_ne!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert!(said.contains("budget"), "{said}");
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        1,
        "a call was made after the budget was spent: {:#?}\n{said}",
        requests
            .iter()
            .map(|r| (&r.path, &r.body["model"], r.body["messages"].to_string()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn the_run_page_shows_the_cli_s_calls_while_it_runs() {
    let test = "the_run_page_shows_the_cli_s_calls_while_it_runs";
    let Some(bin) = claude(test) else {
        return;
    };
    let Some(b) = Browser::start(test) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // The answer after the read streams slowly, so the page is looked at mid-run.
    let model = rt
        .block_on(
            ScriptedServer::builder()
                .chunk_delay(Duration::from_millis(150))
                .start(Script::new([
                    Reply::tool_call("Read", json!({"file_path": "notes/plan.txt"})),
                    Reply::text(
                        "The launch is at dawn, and the weather window stays open for three hours after it.",
                    ),
                ])),
        )
        .expect("scripted server");
    let plan = format!(
        "{NOTES}      - agent: coder\n        inputs: [notes]\n        prompt: When is the launch?\n"
    );
    let fixture = Fixture::new(&pipeline(
        &model.messages_base_url(),
        "[read_file]",
        "",
        &plan,
    ));
    let server = Server::start(
        fixture.path(),
        &["treadle.yml"],
        &[
            ("TREADLE_CLAUDE_BIN", bin.as_str()),
            (KEY_ENV, "scripted-key"),
        ],
    );
    let url = server.url("/api/v1/runs");
    let id = rt.block_on(async {
        server
            .http()
            .post(&url)
            .json(&json!({"pipeline": "treadle"}))
            .send()
            .await
            .expect("POST")
            .json::<Value>()
            .await
            .expect("JSON")
    })["id"]
        .as_u64()
        .expect("run id");
    b.goto(&server.page(&format!("/runs/{id}")));
    let wait = Duration::from_secs(60);
    // The CLI's read is on the page, with its result, while the run is still going.
    b.wait_for(
        "the read on the live page",
        "document.body.textContent.includes('read_file') && document.body.textContent.includes('the launch is at dawn') && document.querySelector('.run-head .badge')?.textContent === 'running'",
        wait,
    );
    b.wait_for(
        "the run to succeed",
        "document.querySelector('.run-head .badge')?.textContent === 'succeeded'",
        wait,
    );
    b.wait_for(
        "the answer",
        "document.body.textContent.includes('three hours after it')",
        wait,
    );
}

/// The CLI examples of docs/agents.md (```yaml cli blocks) run with the real CLI: each
/// agent's `source:` is aimed at the scripted endpoint (the docs leave the endpoint out,
/// as a user with a subscription would), which plays an obedient agent.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_examples_of_the_docs_run() {
    let Some(bin) = claude("the_cli_examples_of_the_docs_run") else {
        return;
    };
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/agents.md"))
        .expect("docs/agents.md");
    let blocks = tagged_blocks(&text, "```yaml cli");
    assert!(
        !blocks.is_empty(),
        "docs/agents.md has no ```yaml cli block"
    );
    let server = ScriptedServer::start(Script::from_fn(obedient_claude))
        .await
        .expect("server");
    let url = server.messages_base_url();
    for (line, yaml) in blocks {
        let aimed = yaml.replace(
            "model: \"@claude/sonnet\"",
            &format!("model: \"@claude/sonnet\"\n    endpoint: {url}\n    api_key_env: {KEY_ENV}"),
        );
        let f = Fixture::new(&aimed);
        let run = treadle(&f, &bin, &["run"]).await;
        assert_eq!(
            run.code(),
            0,
            "docs/agents.md:{line}\n{}{}",
            run.stdout(),
            run.stderr()
        );
    }
}

/// `(line, yaml)` of every block of `text` opened by the line `fence` (```` ```yaml cli ````;
/// tests/codex_agents.rs reads ```` ```yaml codex ````).
pub fn tagged_blocks(text: &str, fence: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim() == fence => current = Some((n + 1, String::new())),
            Some((start, body)) if line.trim_start().starts_with("```") => {
                out.push((*start, std::mem::take(body)));
                current = None;
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// A scripted claude model: calls each bridged tool once (every string argument `Ada`),
/// then the verdict tool with its first choice when it is offered, then answers.
fn obedient_claude(body: &Value) -> Reply {
    let tools: Vec<&Value> = body["tools"].as_array().into_iter().flatten().collect();
    // The tools it called already (a nudge names a tool in text, which is no call).
    let called: Vec<&str> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["name"].as_str())
        .collect();
    let done = |name: &str| called.contains(&name);
    let bridged = tools.iter().filter(|t| {
        t["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("mcp__treadle__") && n != "mcp__treadle__verdict")
    });
    for tool in bridged {
        let name = tool["name"].as_str().unwrap_or_default();
        if done(name) {
            continue;
        }
        let mut args = serde_json::Map::new();
        for (key, _) in tool["input_schema"]["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            args.insert(key.clone(), json!("Ada"));
        }
        return Reply::tool_calls([ToolCall::new(name, Value::Object(args))]);
    }
    if let Some(verdict) = tools.iter().find(|t| t["name"] == "mcp__treadle__verdict")
        && !done("mcp__treadle__verdict")
    {
        // The choice is `choice` in the tool's schema (`verdict` is read as it too).
        let props = &verdict["input_schema"]["properties"];
        let first = props["choice"]["enum"][0].clone();
        let first = if first.is_null() {
            props["verdict"]["enum"][0].clone()
        } else {
            first
        };
        return Reply::tool_calls([ToolCall::new(
            "mcp__treadle__verdict",
            json!({"verdict": first, "reason": "scripted"}),
        )]);
    }
    Reply::text("done").usage(50, 5)
}

/// The CLI against the bundled local model (Qwen 0.5B behind llama.cpp, which answers
/// `POST /v1/messages`), with one tool and a short system prompt so the request fits its
/// 8k context. Needs `TREADLE_REAL_MODEL=1`.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_runs_against_the_local_model() {
    let Some(bin) = claude("the_cli_runs_against_the_local_model") else {
        return;
    };
    if std::env::var("TREADLE_REAL_MODEL").as_deref() != Ok("1") {
        eprintln!("SKIP the_cli_runs_against_the_local_model: TREADLE_REAL_MODEL is not 1");
        return;
    }
    let base = std::env::var("TREADLE_LOCAL_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8091/v1".to_owned());
    let url = base
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_owned();
    let agent = "    system: You answer in one short sentence.\n    max_turns: 3\n";
    let plan = "      - agent: coder\n        prompt: Say hello.\n        timeout: 3m\n";
    let f = Fixture::new(&pipeline(&url, "[read_file]", agent, plan));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    let said = format!("{}{}", run.stdout(), run.stderr());
    // The model is small: what is checked is that the CLI ran a conversation with it
    // and reported its usage, not what it said.
    assert!(said.contains("\"usage\""), "{said}");
    assert!(said.contains("prompt_tokens"), "{said}");
}
