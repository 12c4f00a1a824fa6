//! CLI-backed agents with the real codex CLI (`@codex/MODEL`), driven by the scripted
//! server's Responses endpoint (`POST /v1/responses`) over loopback: a read through the
//! bridge, a write by its shell caught by `assert: files:`, a shell that was not granted
//! (absent, and refused when called anyway), a custom tool through the MCP bridge, a
//! verdict that routes the plan, a run woken again in its session for a missing file,
//! and a dollar budget counted on its priced tokens.
//!
//! The CLI is found through `TREADLE_CODEX_BIN`, which `scripts/test` sets after
//! installing it with npm (and where its absence is a failure). In a plain `cargo test`
//! without it, each test says so and skips.

use crate::common::cli::{CODEX, scripted};
use crate::common::{Fixture, Run};

use serde_json::{Value, json};
use treadle_scripted::{RecordedRequest, Reply, Script, ScriptedServer};

/// The variable holding the scripted endpoint's (meaningless) key.
const KEY_ENV: &str = CODEX.key_env;

/// The codex CLI to run, or `None` (said on stderr) when it is not installed.
pub fn codex(test: &str) -> Option<String> {
    CODEX.find(test)
}

/// A one-agent pipeline whose agent is the codex CLI aimed at `url`, with `tools`,
/// `extra` at the top of the file, and the job's `plan` (YAML, indented by the caller).
pub fn pipeline(url: &str, tools: &str, extra: &str, plan: &str) -> String {
    format!(
        "{extra}agents:\n  - name: coder\n    source:\n      model: \"@codex/scripted\"\n      endpoint: {url}\n      api_key_env: {KEY_ENV}\n    tools: {tools}\njobs:\n  - name: main\n    plan:\n{plan}"
    )
}

/// `treadle ARGS` in the fixture with the CLI and the key.
pub async fn treadle(f: &Fixture, bin: &str, args: &[&str]) -> Run {
    CODEX.treadle(f, bin, args).await
}

/// The tools a request offered, a namespace's as `NAMESPACE__TOOL` (how codex offers an
/// MCP server's tools).
fn offered(request: &RecordedRequest) -> Vec<String> {
    let mut names = Vec::new();
    for tool in request.body["tools"].as_array().into_iter().flatten() {
        let name = tool["name"].as_str().unwrap_or_default();
        match tool["tools"].as_array() {
            Some(inner) => names.extend(
                inner
                    .iter()
                    .filter_map(|t| t["name"].as_str())
                    .map(|t| format!("{name}__{t}")),
            ),
            None => names.push(name.to_owned()),
        }
    }
    names
}

/// The outputs of the calls a request's conversation carries back to the model.
pub fn outputs(request: &RecordedRequest) -> Vec<String> {
    request.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| match &item["output"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// Every path under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

const NOTES: &str = "      - task: prepare\n        outputs: [notes]\n        run: echo 'the launch is at dawn' > notes/plan.txt\n";

#[tokio::test(flavor = "multi_thread")]
async fn codex_reads_a_file_through_the_bridge_and_its_tokens_are_priced() {
    let Some(bin) = codex("codex_reads_a_file_through_the_bridge_and_its_tokens_are_priced") else {
        return;
    };
    let server = scripted([
        Reply::tool_call("mcp__treadle__read_file", json!({"path": "notes/plan.txt"}))
            .usage(2000, 10),
        Reply::text("The launch is at dawn.").usage(2400, 8),
    ])
    .await;
    let plan = format!(
        "{NOTES}      - agent: coder\n        inputs: [notes]\n        prompt: When is the launch? Read notes/plan.txt.\n        assert:\n          stdout: at dawn\n          tool_calls:\n            - name: read_file\n"
    );
    let prices = "prices:\n  scripted: { prompt: 1.0, completion: 2.0 }\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[read_file]", prices, &plan));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[0].path, "/v1/responses");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer scripted-key")
    );
    // The file's content went back to the model as the read's result.
    let read = outputs(&requests[1]);
    assert!(
        read.iter().any(|o| o.contains("the launch is at dawn")),
        "{read:?}"
    );
    let out = run.stdout();
    assert!(
        out.contains("\"tool_call\"") && out.contains("read_file"),
        "{out}"
    );
    // `runs --cost` prices codex's tokens: 4,400 prompt at $1/M and 18 completion at $2/M.
    let cost = treadle(&f, &bin, &["runs", "--cost", "--steps", "1"]).await;
    cost.expect_code(0);
    let cost = cost.stdout();
    let line = cost.lines().find(|l| l.starts_with("coder")).unwrap_or("");
    assert!(line.contains("$0.0044"), "{cost}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_codex_writes_with_its_shell_passes_assert_files() {
    let Some(bin) = codex("a_file_codex_writes_with_its_shell_passes_assert_files") else {
        return;
    };
    let server = scripted([
        Reply::tool_call(
            "exec_command",
            json!({"cmd": "mkdir -p report && printf '# Summary\\nAll good.\\n' > report/summary.md"}),
        ),
        Reply::text("Wrote the summary."),
    ])
    .await;
    let plan = "      - agent: coder\n        outputs: [report]\n        prompt: Write report/summary.md.\n        assert:\n          files: [report/summary.md]\n          tool_calls:\n            - name: run_shell\n      - task: check\n        inputs: [report]\n        run: cat report/summary.md\n        assert:\n          stdout: All good.\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[run_shell]", "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    assert_eq!(server.request_count(), 2, "{}", run.stdout());
    let tools = offered(&server.requests()[0]);
    assert!(tools.iter().any(|t| t == "exec_command"), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_that_was_not_granted_is_absent_from_codex_and_refused() {
    let Some(bin) = codex("a_shell_that_was_not_granted_is_absent_from_codex_and_refused") else {
        return;
    };
    // The scripted model calls the shell anyway.
    let server = scripted([
        Reply::tool_call("exec_command", json!({"cmd": "touch pwned"})),
        Reply::text("I could not run it."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Create a file named pwned.\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[read_file]", "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    let requests = server.requests();
    let tools = offered(&requests[0]);
    assert!(
        tools.iter().any(|t| t == "mcp__treadle__read_file"),
        "{tools:?}"
    );
    for absent in [
        "exec_command",
        "write_stdin",
        "web_search",
        "spawn_agent",
        "view_image",
        "request_user_input",
    ] {
        assert!(
            !tools.iter().any(|t| t.ends_with(absent)),
            "{absent}: {tools:?}"
        );
    }
    let said = outputs(&requests[1]);
    assert!(said.iter().any(|o| o.contains("unsupported")), "{said:?}");
    assert!(
        !walk(f.path()).iter().any(|p| p.ends_with("pwned")),
        "the shell ran"
    );
}

/// A step granted nothing is offered nothing: no tool of codex's own (its image viewer, its
/// question tool) and no MCP server, whose resource tools codex would otherwise add.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_granted_nothing_offers_codex_no_tool() {
    let Some(bin) = codex("a_step_granted_nothing_offers_codex_no_tool") else {
        return;
    };
    let server = scripted([Reply::text("Hello.")]).await;
    let plan = "      - agent: coder\n        prompt: Say hello.\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[]", "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    assert_eq!(server.request_count(), 1, "{}", run.stdout());
    let tools = offered(&server.requests()[0]);
    assert!(tools.is_empty(), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_tool_reaches_codex_through_the_mcp_bridge() {
    let Some(bin) = codex("a_custom_tool_reaches_codex_through_the_mcp_bridge") else {
        return;
    };
    let server = scripted([
        Reply::tool_call("mcp__treadle__greet", json!({"who": "Ada"})),
        Reply::text("Greeted."),
    ])
    .await;
    let tools = "\n      - name: greet\n        description: Greets someone.\n        run: echo hello {{ .args.who }}";
    let plan = "      - agent: coder\n        prompt: Greet Ada.\n        assert:\n          tool_calls:\n            - name: greet\n              args: { who: Ada }\n";
    let f = Fixture::new(&pipeline(server.base_url(), tools, "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        offered(&requests[0]).contains(&"mcp__treadle__greet".to_owned()),
        "{:?}",
        offered(&requests[0])
    );
    let said = outputs(&requests[1]);
    assert!(said.iter().any(|o| o.contains("hello Ada")), "{said:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_s_verdict_routes_the_plan() {
    let Some(bin) = codex("codex_s_verdict_routes_the_plan") else {
        return;
    };
    let server = scripted([
        Reply::tool_call(
            "mcp__treadle__verdict",
            json!({"choice": "reject", "reason": "the tests fail"}),
        ),
        Reply::text("Rejected."),
    ])
    .await;
    // `reject` jumps over `publish` to `revise`, the last step.
    let plan = "      - agent: coder\n        prompt: Review the change.\n        verdicts:\n          - reject: revise\n          - approve: publish\n      - task: publish\n        run: echo shipping\n      - task: revise\n        run: echo revising\n    assert:\n      execution: [coder, revise]\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[]", "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    assert!(run.stdout().contains("revising"), "{}", run.stdout());
    assert!(!run.stdout().contains("shipping"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_that_ends_without_its_file_is_resumed_and_writes_it() {
    let Some(bin) = codex("codex_that_ends_without_its_file_is_resumed_and_writes_it") else {
        return;
    };
    let server = scripted([
        Reply::text("Done, I think."),
        Reply::tool_call(
            "mcp__treadle__write_file",
            json!({"path": "out/answer.txt", "content": "42\n"}),
        ),
        Reply::text("Wrote it."),
    ])
    .await;
    let plan = "      - agent: coder\n        outputs: [out]\n        prompt: Write out/answer.txt.\n        assert:\n          files: [out/answer.txt]\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[write_file]", "", plan));
    let run = treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // The second run is the same conversation: the first answer is in it, then the nudge.
    let input = requests[1].body["input"].to_string();
    assert!(input.contains("Done, I think."), "{input}");
    assert!(input.contains("out/answer.txt"), "{input}");
    assert!(run.stdout().contains("exec resume"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dollar_budget_stops_codex_on_its_priced_tokens() {
    let Some(bin) = codex("a_dollar_budget_stops_codex_on_its_priced_tokens") else {
        return;
    };
    // One answer far over the budget; the step has no file yet, so only the budget keeps
    // it from being woken again.
    let server = scripted([
        Reply::text("That was expensive.").usage(1000, 500_000),
        Reply::text("never asked for"),
    ])
    .await;
    let prices = "prices:\n  scripted: { prompt: 1.0, completion: 2.0 }\n";
    let plan = "      - agent: coder\n        outputs: [out]\n        prompt: Write out/big.txt.\n        budget:\n          usd: 0.05\n        assert:\n          files: [out/big.txt]\n";
    let f = Fixture::new(&pipeline(server.base_url(), "[write_file]", prices, plan));
    let run = treadle(&f, &bin, &["run"]).await;
    assert_ne!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert!(said.contains("budget"), "{said}");
    assert_eq!(
        server.request_count(),
        1,
        "the CLI was woken past its budget"
    );
}

/// The codex examples of docs/agents.md (```yaml codex blocks) run with the real CLI:
/// each agent's `source:` is aimed at the scripted endpoint, which plays an obedient
/// agent.
#[tokio::test(flavor = "multi_thread")]
async fn the_codex_examples_of_the_docs_run() {
    let Some(bin) = codex("the_codex_examples_of_the_docs_run") else {
        return;
    };
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/agents.md"))
        .expect("docs/agents.md");
    let blocks = crate::cli_agents::tagged_blocks(&text, "```yaml codex");
    assert!(
        !blocks.is_empty(),
        "docs/agents.md has no ```yaml codex block"
    );
    let server = ScriptedServer::start(Script::from_fn(obedient_codex))
        .await
        .expect("server");
    for (line, yaml) in blocks {
        let aimed = yaml.replace(
            "model: \"@codex/gpt-5\"",
            &format!(
                "model: \"@codex/gpt-5\"\n    endpoint: {}\n    api_key_env: {KEY_ENV}",
                server.base_url()
            ),
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
    assert!(server.request_count() > 0);
}

/// A scripted codex model: calls each tool of the bridge's namespace once (every string
/// argument `Ada`), then the verdict with its first choice when it is offered, then
/// answers.
fn obedient_codex(body: &Value) -> Reply {
    let bridge = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == "mcp__treadle");
    let tools: Vec<&Value> = bridge
        .and_then(|b| b["tools"].as_array())
        .into_iter()
        .flatten()
        .collect();
    let called: Vec<&str> = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call")
        .filter_map(|item| item["name"].as_str())
        .collect();
    for tool in tools.iter().filter(|t| t["name"] != "verdict") {
        let name = tool["name"].as_str().unwrap_or_default();
        if called.contains(&name) {
            continue;
        }
        let mut args = serde_json::Map::new();
        for (key, _) in tool["parameters"]["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            args.insert(key.clone(), json!("Ada"));
        }
        return Reply::tool_call(format!("mcp__treadle__{name}"), Value::Object(args));
    }
    if let Some(verdict) = tools.iter().find(|t| t["name"] == "verdict")
        && !called.contains(&"verdict")
    {
        let first = verdict["parameters"]["properties"]["choice"]["enum"][0].clone();
        return Reply::tool_call(
            "mcp__treadle__verdict",
            json!({"choice": first, "reason": "scripted"}),
        );
    }
    Reply::text("done").usage(50, 5)
}

/// The CLI against the bundled local model (Qwen 0.5B behind llama.cpp, which answers
/// `POST /v1/responses`), with no tools and a short system prompt (replacing codex's own
/// instructions) so the request fits its 8k context. Needs `TREADLE_REAL_MODEL=1`.
#[tokio::test(flavor = "multi_thread")]
async fn codex_runs_against_the_local_model() {
    let Some(bin) = codex("codex_runs_against_the_local_model") else {
        return;
    };
    if std::env::var("TREADLE_REAL_MODEL").as_deref() != Ok("1") {
        eprintln!("SKIP codex_runs_against_the_local_model: TREADLE_REAL_MODEL is not 1");
        return;
    }
    let url = std::env::var("TREADLE_LOCAL_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8091/v1".to_owned());
    let yaml = format!(
        "agents:\n  - name: coder\n    source:\n      model: \"@codex/qwen2.5-coder-0.5b\"\n      endpoint: {url}\n    system: You answer in one short sentence.\n    tools: []\njobs:\n  - name: main\n    plan:\n      - agent: coder\n        prompt: Say hello.\n        timeout: 10m\n"
    );
    let f = Fixture::new(&yaml);
    let started = std::time::Instant::now();
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    println!(
        "codex against the local model: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let said = format!("{}{}", run.stdout(), run.stderr());
    // The model is small: what is checked is that codex ran a conversation with it and
    // reported its usage, not what it said.
    assert!(said.contains("\"usage\""), "{said}");
    assert!(said.contains("prompt_tokens"), "{said}");
    assert!(!said.contains("\"prompt_tokens\":0"), "{said}");
}
