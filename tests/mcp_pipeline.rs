//! MCP servers in pipelines: an agent calls a tool of the real fixture server over stdio
//! (against the scripted model server), the server runs in the step's sandbox (a
//! credential place refused, its tools still working), `validate` finds a missing server
//! command, the load checks refuse a grant naming an undeclared server, and an MCP tool's
//! `max_calls:` refuses a call past its budget before the server sees it.

use crate::common;

use common::Fixture;
use common::mcp::fixture_server;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

fn pipeline(command: &str) -> String {
    format!(
        r#"agents:
  - name: calc
    system: You add numbers with the tools you are given.
    tools: [read_file, fixture__add]
    mcp_servers:
      - name: fixture
        command: {command}
jobs:
  - name: sum
    plan:
      - agent: calc
        prompt: What is 2 + 3? Use the add tool.
        assert:
          tool_calls:
            - name: fixture__add
              args: {{ a: 2, b: 3 }}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_a_stdio_mcp_tool() {
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("fixture__add", json!({"a": 2, "b": 3})),
        Reply::text("5"),
    ]))
    .await
    .expect("scripted server");
    let f = Fixture::new(&pipeline(&bin.display().to_string()));
    let url = server.base_url().to_string();
    let (validate, run) = tokio::task::spawn_blocking(move || {
        let env = [("TREADLE_LOCAL_URL", url.as_str())];
        (
            f.treadle_env(&["validate"], &env),
            f.treadle_env(&["run"], &env),
        )
    })
    .await
    .unwrap();
    validate.expect_code(0);
    run.expect_code(0);

    let requests = server.requests();
    // The model was offered the granted MCP tool (and not the fixture's others).
    let offered: Vec<String> = requests[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert!(offered.iter().any(|n| n == "fixture__add"), "{offered:?}");
    assert!(!offered.iter().any(|n| n == "fixture__echo"), "{offered:?}");
    // The server's answer reached the model as the tool result.
    let last = requests.last().expect("a second model request");
    let results: Vec<&Value> = last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert!(
        results.iter().any(|m| m["content"].as_str() == Some("5")),
        "tool result not sent: {}",
        last.body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_server_gets_the_allow_listed_environment_and_its_env_only() {
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("fixture__env_names", json!({})),
        Reply::text("done"),
    ]))
    .await
    .expect("scripted server");
    let yaml = pipeline(&bin.display().to_string())
        .replace("fixture__add]", "fixture__env_names]")
        .replace(
            "        command: ",
            "        env: { SERVER_VAR: x }\n        command: ",
        )
        .replace("        assert:\n          tool_calls:\n            - name: fixture__add\n              args: { a: 2, b: 3 }\n", "");
    let f = Fixture::new(&yaml);
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(
            &["run"],
            &[
                ("TREADLE_LOCAL_URL", url.as_str()),
                ("OPENAI_API_KEY", "sk-not-for-servers-123"),
                ("TREADLE_UNLISTED_VAR", "1"),
            ],
        )
    })
    .await
    .unwrap();
    run.expect_code(0);
    let last = server.requests().pop().expect("a second model request");
    let names = last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let names: Vec<&str> = names.lines().collect();
    assert!(
        names.contains(&"PATH") && names.contains(&"SERVER_VAR"),
        "{names:?}"
    );
    for hidden in [
        "OPENAI_API_KEY",
        "TREADLE_UNLISTED_VAR",
        "TREADLE_LOCAL_URL",
    ] {
        assert!(
            !names.contains(&hidden),
            "{hidden} reached the server: {names:?}"
        );
    }
}

/// The tool messages of the model's last request, joined.
fn tool_results(server: &ScriptedServer) -> String {
    let last = server.requests().pop().expect("a second model request");
    last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_server_runs_in_the_steps_sandbox() {
    if treadle::confine::abi().is_none() {
        eprintln!("SKIP: no Landlock");
        return;
    }
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let key = home.path().join(".ssh/id_rsa");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "PRIVATE-KEY-of-the-user\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let other = outside.path().join("notes.txt");
    std::fs::write(&other, "another project's notes\n").unwrap();
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([
            ToolCall::new("fixture__read_path", json!({"path": key})),
            ToolCall::new("fixture__read_path", json!({"path": other})),
            ToolCall::new("fixture__add", json!({"a": 2, "b": 3})),
        ]),
        Reply::text("done"),
    ]))
    .await
    .expect("scripted server");
    let yaml = pipeline(&bin.display().to_string())
        .replace("fixture__add]", "fixture__add, fixture__read_path]")
        .replace("        assert:\n          tool_calls:\n            - name: fixture__add\n              args: { a: 2, b: 3 }\n", "");
    let f = Fixture::new(&yaml);
    let url = server.base_url().to_string();
    let home_dir = home.path().display().to_string();
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(
            &["run"],
            &[("TREADLE_LOCAL_URL", url.as_str()), ("HOME", &home_dir)],
        )
    })
    .await
    .unwrap();
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        !results.contains("PRIVATE-KEY"),
        "the server read the key:\n{results}"
    );
    assert!(
        !results.contains("another project"),
        "the server read outside its sandbox:\n{results}"
    );
    assert_eq!(results.matches("Permission denied").count(), 2, "{results}");
    // Its tools still work.
    assert!(results.lines().any(|l| l == "5"), "{results}");
}

#[test]
fn validate_reports_a_missing_mcp_command() {
    let f = Fixture::new(&pipeline("treadle-no-such-mcp-server"));
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains("command `treadle-no-such-mcp-server` is not on PATH"),
        "{err}"
    );
    assert!(
        err.contains("hint: install `treadle-no-such-mcp-server`"),
        "{err}"
    );
}

#[test]
fn a_grant_naming_an_undeclared_server_is_a_load_error() {
    let yaml = pipeline("sh").replace("fixture__add]", "fixture__add, github__*]");
    let run = Fixture::new(&yaml).treadle(&["run"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(
            "tool `github__*` comes from MCP server `github`, which agent `calc` does not declare"
        ),
        "{err}"
    );
    assert!(
        err.contains("hint: servers of this agent: fixture"),
        "{err}"
    );
}

/// The pipeline with `fixture__add` granted as `{ mcp: fixture, ... }` with `extra` keys.
fn budgeted(command: &str, extra: &str) -> String {
    pipeline(command).replace(
        "tools: [read_file, fixture__add]",
        &format!("tools: [read_file, {{ mcp: fixture, {extra}max_calls: 1 }}]"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_tool_past_its_max_calls_is_refused_before_the_server_sees_it() {
    let bin = tokio::task::spawn_blocking(fixture_server).await.unwrap();
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("fixture__add", json!({"a": 2, "b": 3})),
        Reply::tool_call("fixture__add", json!({"a": 4, "b": 5})),
        Reply::text("5"),
    ]))
    .await
    .expect("scripted server");
    let f = Fixture::new(&budgeted(&bin.display().to_string(), "tool: add, "));
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", url.as_str())])
    })
    .await
    .unwrap();
    run.expect_code(0);
    let results = tool_results(&server);
    let results: Vec<&str> = results.lines().collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0], "5", "the first call ran: {results:?}");
    // The second never reached the server (it would have answered 9).
    assert!(
        results[1].contains("call budget exhausted (1 call(s) per conversation)")
            && results[1].contains("fixture__add"),
        "{results:?}"
    );
}

#[test]
fn max_calls_on_a_whole_mcp_server_is_a_load_error() {
    let run = Fixture::new(&budgeted("sh", "")).treadle(&["run"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains("`max_calls:` of agent `calc`'s grant of MCP server `fixture` needs one tool"),
        "{err}"
    );
    assert!(err.contains("hint: a budget is per tool"), "{err}");
}
