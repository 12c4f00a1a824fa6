//! The three examples of docs/hooks.md, each run as written against a scripted model that
//! does what the example is about: a `git push` the policy blocks, calls the audit log
//! records as JSON lines, and a write the formatter tidies.

use crate::common;

use std::path::{Path, PathBuf};

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// The ```yaml blocks of docs/hooks.md, in order.
fn examples() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/hooks.md"))
        .expect("docs/hooks.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_start().starts_with("```yaml") => current = Some(String::new()),
            Some(body) if line.trim_start().starts_with("```") => {
                blocks.push(std::mem::take(body));
                current = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Every file under `dir` named `name`.
fn find(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(find(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    found
}

fn tool_results(server: &ScriptedServer) -> String {
    server
        .requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn run_example(index: usize, script: Script) -> (ScriptedServer, Fixture, common::Run) {
    let examples = examples();
    assert_eq!(examples.len(), 3, "docs/hooks.md has three examples");
    let server = ScriptedServer::start(script).await.expect("server");
    let (f, run) = Fixture::new(&examples[index])
        .run_at(server.base_url())
        .await;
    (server, f, run)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_example_blocks_git_push() {
    let script = Script::new([
        Reply::tool_call(
            "run_shell",
            json!({"command": "git tag v1 && printf 'PUSH%s' ED && git push --tags"}),
        ),
        Reply::text("Pushed."),
    ]);
    let (server, _f, run) = run_example(0, script).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        results.contains("denied: git push is for people"),
        "{results}"
    );
    assert!(!results.contains("PUSHED"), "{results}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_example_logs_every_call_as_json_lines() {
    let script = Script::new([
        Reply::tool_call(
            "write_file",
            json!({"path": "notes/summary.md", "content": "short\n"}),
        ),
        Reply::tool_call("read_file", json!({"path": "notes/summary.md"})),
        Reply::text("Done."),
    ]);
    let (_server, f, run) = run_example(1, script).await;
    run.expect_code(0);
    assert!(
        run.stdout().contains("2 audit/calls.jsonl"),
        "{}",
        run.stdout()
    );
    let calls = find(f.path(), "calls.jsonl");
    let text = std::fs::read_to_string(calls.first().expect("calls.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let tools: Vec<&str> = lines
        .iter()
        .map(|l| l["tool_name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(tools, ["write_file", "read_file"]);
    assert_eq!(lines[0]["tool_input"]["path"], "notes/summary.md");
    assert_eq!(lines[0]["hook_event_name"], "PreToolUse");
    let results = find(f.path(), "results.jsonl");
    let text = std::fs::read_to_string(results.first().expect("results.jsonl")).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["tool_response"], "short\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_formatter_example_tidies_what_was_written() {
    if treadle::environ::find_program("jq").is_none() {
        eprintln!("SKIP: the formatter example needs jq on PATH");
        return;
    }
    let script = Script::new([
        Reply::tool_call(
            "write_file",
            json!({"path": "notes/today.md", "content": "one   \ntwo\t\n"}),
        ),
        Reply::text("Done."),
    ]);
    let (_server, f, run) = run_example(2, script).await;
    run.expect_code(0);
    let written = find(f.path(), "today.md");
    assert!(!written.is_empty(), "notes/today.md was written");
    for path in written {
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "one\ntwo\n",
            "{}",
            path.display()
        );
    }
}
