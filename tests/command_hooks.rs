//! Command hooks in the pipeline file (`hooks:`), with real hook processes, through
//! `treadle run` against the scripted model: a block by exit 2 and by JSON, a crash and a
//! timeout that deny, an input rewrite, an unchanged Claude Code hook script, an `ask`
//! answered through `treadle approve`, no key and no project writes for hooks, and what
//! `validate` says.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{Fixture, Run};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// `printf` so that the output (`RAN-OK`) is not a substring of the arguments: a result
/// holding it means the command ran.
const RUNS: &str = "printf 'RAN-%s' OK";

fn pipeline(hooks: &str) -> String {
    format!(
        "agents:\n  - name: sh\n    tools: [run_shell]\n    hooks:\n{hooks}jobs:\n  - name: j\n    plan:\n      - agent: sh\n        name: act\n        prompt: Do it.\n        timeout: 60s\n"
    )
}

/// One `pre_tool_use` hook on `run_shell` running `command` (YAML-quoted here).
fn guard(command: &str, extra: &str) -> String {
    pipeline(&format!(
        "      pre_tool_use:\n        - matcher: run_shell\n          command: {}\n{extra}",
        serde_json::to_string(command).unwrap()
    ))
}

fn calls(command: &str) -> Script {
    Script::new([
        Reply::tool_call("run_shell", json!({ "command": command })),
        Reply::text("Done."),
    ])
}

/// The tool results the model was sent, joined.
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

fn script_file(f: &Fixture, name: &str, body: &str) {
    let path = f.path().join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

async fn run_with(
    yaml: &str,
    script: Script,
    setup: impl FnOnce(&Fixture),
) -> (ScriptedServer, Fixture, Run) {
    let server = ScriptedServer::start(script).await.expect("server");
    let f = Fixture::new(yaml);
    setup(&f);
    let (f, run) = f.run_at(server.base_url()).await;
    (server, f, run)
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_2_blocks_git_push_with_stderr_as_the_reason() {
    let hook = "#!/bin/sh\nif grep -q 'git push'; then echo 'pushing is for people, not agents' >&2; exit 2; fi\n";
    let yaml = guard("./hooks/no-push.sh", "          timeout: 5s\n");
    let (server, _f, run) = run_with(
        &yaml,
        calls(&format!("{RUNS} && git push origin main")),
        |f| script_file(f, "hooks/no-push.sh", hook),
    )
    .await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        results.contains("denied: pushing is for people, not agents"),
        "{results}"
    );
    assert!(
        !results.contains("RAN-OK"),
        "the blocked call ran: {results}"
    );
    assert!(
        run.stdout().contains("hook hooks.pre_tool_use[0]"),
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_decision_blocks_and_a_plain_exit_0_allows() {
    let yaml = guard(
        r#"echo '{"decision": "deny", "reason": "read-only today"}'"#,
        "",
    );
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(results.contains("denied: read-only today"), "{results}");
    assert!(!results.contains("RAN-OK"), "{results}");

    let yaml = guard("cat > /dev/null; echo checked", "");
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    assert!(
        tool_results(&server).contains("RAN-OK"),
        "{}",
        tool_results(&server)
    );
    assert!(
        run.stdout().contains("hook stdout: checked"),
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashing_guard_denies_and_says_which_hook_failed() {
    let yaml = guard("jq-that-is-not-installed -r .tool_input.command", "");
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        !results.contains("RAN-OK"),
        "a crashed guard let the call run: {results}"
    );
    assert!(results.contains("hook hooks.pre_tool_use[0]"), "{results}");
    assert!(results.contains("exited with code 127"), "{results}");
    assert!(run.stdout().contains("FAILED"), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guard_past_its_timeout_is_killed_and_denies() {
    let yaml = guard("sleep 30", "          timeout: 1s\n");
    let started = std::time::Instant::now();
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(!results.contains("RAN-OK"), "{results}");
    assert!(results.contains("timeout"), "{results}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_hook_error_allow_lets_the_call_run_and_says_so() {
    let yaml = guard("exit 1", "          on_hook_error: allow\n");
    let (server, f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    assert!(tool_results(&server).contains("RAN-OK"));
    assert!(
        run.stdout().contains("[on_hook_error: allow]"),
        "{}",
        run.stdout()
    );
    // `validate` asks the agent's model server whether it answers: the scripted one here,
    // so the test does not depend on the local model running.
    let validate = f.treadle_env(&["validate"], &[("TREADLE_LOCAL_URL", server.base_url())]);
    let said = format!("{}{}", validate.stdout(), validate.stderr());
    assert!(said.contains("on_hook_error: allow"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn updated_input_rewrites_the_call_and_is_checked_against_the_schema() {
    let yaml = guard(
        r#"echo '{"updated_input": {"command": "printf REWRITTEN-%s call"}}'"#,
        "",
    );
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(results.contains("REWRITTEN-call"), "{results}");
    assert!(!results.contains("RAN-OK"), "{results}");

    // Arguments the tool's schema refuses are refused, not run.
    let yaml = guard(r#"echo '{"updated_input": {"command": 7}}'"#, "");
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(results.contains("do not fit its schema"), "{results}");
    assert!(!results.contains("RAN-OK"), "{results}");
}

/// A PreToolUse hook as Claude Code's documentation writes them: `jq` over the envelope,
/// the decision in `hookSpecificOutput`, byte for byte what a Claude Code user has.
const CLAUDE_CODE_HOOK: &str = r#"#!/bin/bash
# PreToolUse: refuse destructive commands.
command=$(jq -r '.tool_input.command // empty')
if [[ "$command" == *"rm -rf"* ]]; then
  jq -n '{
    hookSpecificOutput: {
      hookEventName: "PreToolUse",
      permissionDecision: "deny",
      permissionDecisionReason: "Destructive command blocked by hook"
    }
  }'
fi
exit 0
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_claude_code_hook_script_works() {
    if treadle::environ::find_program("jq").is_none()
        || treadle::environ::find_program("bash").is_none()
    {
        eprintln!("SKIP: the Claude Code hook script needs jq and bash on PATH");
        return;
    }
    let yaml = guard("./.claude/hooks/guard.sh", "");
    let (server, _f, run) = run_with(&yaml, calls(&format!("{RUNS}; rm -rf build")), |f| {
        script_file(f, ".claude/hooks/guard.sh", CLAUDE_CODE_HOOK)
    })
    .await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        results.contains("Destructive command blocked by hook"),
        "{results}"
    );
    assert!(!results.contains("RAN-OK"), "{results}");
}

/// Claude Code's "protect sensitive files" PreToolUse hook, as its users have it: it reads
/// `.tool_input.file_path`, the name Claude Code's `Write` and `Edit` give the file.
const CLAUDE_CODE_FILE_HOOK: &str = r#"#!/usr/bin/env bash
file_path=$(jq -r '.tool_input.file_path // empty')
if [[ "$file_path" == *.env ]]; then
  echo "Blocked: $file_path is protected" >&2
  exit 2
fi
exit 0
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_hook_reading_file_path_guards_treadles_file_tools() {
    if treadle::environ::find_program("jq").is_none()
        || treadle::environ::find_program("bash").is_none()
    {
        eprintln!("SKIP: the Claude Code hook script needs jq and bash on PATH");
        return;
    }
    let yaml = "agents:\n  - name: w\n    tools: [write_file]\n    hooks:\n      pre_tool_use:\n        - matcher: write_file\n          command: ./.claude/hooks/protect.sh\njobs:\n  - name: j\n    plan:\n      - agent: w\n        name: act\n        prompt: Write.\n        timeout: 60s\n";
    let script = Script::new([
        Reply::tool_call(
            "write_file",
            json!({ "path": "prod.env", "content": "KEY=1" }),
        ),
        Reply::tool_call(
            "write_file",
            json!({ "path": "notes.txt", "content": "ok" }),
        ),
        Reply::text("Done."),
    ]);
    let (server, _f, run) = run_with(yaml, script, |f| {
        script_file(f, ".claude/hooks/protect.sh", CLAUDE_CODE_FILE_HOOK)
    })
    .await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(
        results.contains("denied: Blocked: prod.env is protected"),
        "the .env write is blocked by its file_path: {results}"
    );
    assert!(!results.contains("to prod.env"), "{results}");
    assert!(
        results.contains("wrote 2 bytes to notes.txt"),
        "the other write is allowed: {results}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_is_answered_through_treadle_approve() {
    let yaml = guard(
        r#"echo '{"decision": "ask", "reason": "run this command?"}'"#,
        "",
    );
    let server = ScriptedServer::start(calls(RUNS)).await.expect("server");
    let f = Fixture::new(&yaml);
    let child = common::spawn_run(&f, &[("TREADLE_LOCAL_URL", server.base_url())]);
    let f = tokio::task::spawn_blocking(move || {
        common::wait_until_asked(&f, "act");
        let approvals = f.treadle(&["approvals"]);
        assert!(
            approvals.stdout().contains("run this command?"),
            "{}",
            approvals.stdout()
        );
        f.treadle(&["approve", "1", "act"]).expect_code(0);
        f
    })
    .await
    .unwrap();
    let run = tokio::task::spawn_blocking(move || Run(child.wait_with_output().unwrap()))
        .await
        .unwrap();
    run.expect_code(0);
    assert!(
        tool_results(&server).contains("RAN-OK"),
        "{}",
        tool_results(&server)
    );
    drop(f);
}

/// An agent step that keeps its `logs/` directory (step directories are removed after the
/// run; outputs are kept).
const KEEP_LOGS: (&str, &str) = (
    "        timeout: 60s\n",
    "        timeout: 60s\n        outputs: [logs]\n",
);

/// Every file under `dir` named `name`.
fn find(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
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

#[tokio::test(flavor = "multi_thread")]
async fn hooks_get_no_key_and_cannot_write_the_project() {
    let Some(_abi) = treadle::confine::abi() else {
        let why = treadle::confine::unavailable().map_or("no Landlock".into(), |w| w.to_string());
        eprintln!("SKIP: {why}");
        return;
    };
    let yaml = guard(
        r#"mkdir -p "$TREADLE_STEP_DIR/logs"; env > "$TREADLE_STEP_DIR/logs/hook-env.txt"; cat ./treadle.yml > "$TREADLE_STEP_DIR/logs/read-project.txt"; touch ./escaped 2>/dev/null; exit 0"#,
        "",
    )
    .replace(KEEP_LOGS.0, KEEP_LOGS.1)
    .replace(
        "    tools: [run_shell]\n",
        "    tools: [run_shell]\n    source: { model: local/m, api_key_env: HOOKS_TEST_KEY }\n",
    );
    let server = ScriptedServer::start(calls(RUNS)).await.expect("server");
    let f = Fixture::new(&yaml);
    let url = server.base_url().to_owned();
    let (f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(
            &["run"],
            &[
                ("TREADLE_LOCAL_URL", &url),
                ("HOOKS_TEST_KEY", "sk-hook-secret-4711"),
            ],
        );
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);
    let env = find(f.path(), "hook-env.txt");
    let env =
        std::fs::read_to_string(env.first().expect("the hook wrote its environment")).unwrap();
    assert!(
        !env.contains("sk-hook-secret-4711"),
        "the key reached the hook"
    );
    assert!(env.contains("TREADLE_PROJECT_DIR="), "{env}");
    let read = find(f.path(), "read-project.txt");
    let read = std::fs::read_to_string(read.first().expect("read the project")).unwrap();
    assert!(read.contains("agents:"), "the project is readable: {read}");
    assert!(
        !f.path().join("escaped").exists(),
        "a hook wrote into the project"
    );
}

#[test]
fn validate_checks_keys_matchers_and_that_commands_exist() {
    let cases: [(&str, &[&str]); 4] = [
        (
            "      pre_tool_use:\n        - matcher: \"(unclosed\"\n          command: \"true\"\n",
            &["invalid matcher", "hint:"],
        ),
        (
            "      pre_tool_use:\n        - command: ./hooks/missing.sh\n",
            &["command `./hooks/missing.sh` does not exist"],
        ),
        (
            "      on_write:\n        - command: \"true\"\n",
            &["on_write"],
        ),
        (
            "      stop:\n        - matcher: run_shell\n          command: \"true\"\n",
            &["not about a tool"],
        ),
    ];
    for (hooks, expect) in cases {
        let f = Fixture::new(&pipeline(hooks));
        let run = f.treadle(&["validate"]);
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert_ne!(run.code(), 0, "{hooks}: {said}");
        for text in expect {
            assert!(said.contains(text), "{hooks}: expected {text:?} in {said}");
        }
        assert!(said.contains("treadle.yml:"), "{said}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn default_hooks_run_for_every_agent_before_its_own_and_observers_see_results() {
    let yaml = format!(
        "defaults:\n  hooks:\n    pre_tool_use:\n      - command: \"mkdir -p \\\"$TREADLE_STEP_DIR/logs\\\"; echo default >> \\\"$TREADLE_STEP_DIR/logs/order.txt\\\"\"\n    post_tool_use:\n      - command: \"jq -c '{{tool: .tool_name, result: .tool_response}}' >> \\\"$TREADLE_STEP_DIR/logs/post.jsonl\\\" 2>/dev/null || cat >> \\\"$TREADLE_STEP_DIR/logs/post.jsonl\\\"\"\n{}",
        pipeline(
            "      pre_tool_use:\n        - command: \"echo own >> \\\"$TREADLE_STEP_DIR/logs/order.txt\\\"\"\n"
        )
    );
    let yaml = yaml.replace(KEEP_LOGS.0, KEEP_LOGS.1);
    let (server, f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    assert!(tool_results(&server).contains("RAN-OK"));
    let order = find(f.path(), "order.txt");
    let order = std::fs::read_to_string(order.first().expect("order.txt")).unwrap();
    assert_eq!(order, "default\nown\n");
    let post = find(f.path(), "post.jsonl");
    let post = std::fs::read_to_string(post.first().expect("post.jsonl")).unwrap();
    let line: Value = serde_json::from_str(post.lines().next().unwrap()).unwrap();
    assert!(line.to_string().contains("RAN-OK"), "{line}");
}

/// A hook on `event` that appends the envelope's `hook_event_name` to the step's
/// `logs/events.txt`.
fn logging(event: &str) -> String {
    format!(
        "      {event}:\n        - command: \"mkdir -p \\\"$TREADLE_STEP_DIR/logs\\\"; jq -r .hook_event_name >> \\\"$TREADLE_STEP_DIR/logs/events.txt\\\"\"\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_event_fires_at_its_point_of_the_step_in_order() {
    if treadle::environ::find_program("jq").is_none() {
        eprintln!("SKIP: the event log hooks need jq on PATH");
        return;
    }
    let events = [
        "session_start",
        "user_prompt_submit",
        "pre_tool_use",
        "post_tool_use",
        "stop",
        "session_end",
    ];
    let hooks: String = events.iter().map(|e| logging(e)).collect();
    let yaml = pipeline(&hooks).replace(KEEP_LOGS.0, KEEP_LOGS.1);
    let (server, f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    run.expect_code(0);
    assert!(tool_results(&server).contains("RAN-OK"));
    let log = find(f.path(), "events.txt");
    let log = std::fs::read_to_string(log.first().expect("events.txt")).unwrap();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
            "SessionEnd"
        ],
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_prompt_submit_guard_that_blocks_keeps_the_prompt_from_the_model() {
    let yaml = pipeline(
        "      user_prompt_submit:\n        - command: \"echo 'no prompts on Fridays' >&2; exit 2\"\n",
    );
    let (server, _f, run) = run_with(&yaml, calls(RUNS), |_| {}).await;
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_ne!(run.code(), 0, "{said}");
    assert!(said.contains("no prompts on Fridays"), "{said}");
    assert!(
        server.requests().is_empty(),
        "the model was asked: {} request(s)\n{said}",
        server.requests().len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_get_absolute_dirs_and_a_post_tool_use_exit_2_does_not_say_blocked() {
    // `cd /` first: a relative directory would then name somewhere else.
    let hooks = "      pre_tool_use:\n        - matcher: run_shell\n          command: \"cd / && echo P=$TREADLE_PROJECT_DIR C=$CLAUDE_PROJECT_DIR S=$TREADLE_STEP_DIR && test -f $TREADLE_PROJECT_DIR/treadle.yml && echo found-project\"\n      post_tool_use:\n        - matcher: run_shell\n          command: \"echo too late >&2; exit 2\"\n";
    let (server, f, run) = run_with(&pipeline(hooks), calls(RUNS), |_| ()).await;
    run.expect_code(0);
    let out = run.stdout();
    let root = f
        .path()
        .canonicalize()
        .unwrap_or_else(|_| f.path().to_owned());
    for var in ["P=/", "C=/", "S=/"] {
        assert!(out.contains(var), "{var} is not absolute:\n{out}");
    }
    assert!(
        out.contains(&format!("P={}", root.display()))
            || out.contains(&format!("P={}", f.path().display())),
        "{out}"
    );
    assert!(out.contains("found-project"), "{out}");
    // The call ran; the observer's exit 2 is reported, not called a block.
    assert!(tool_results(&server).contains("RAN-OK"));
    assert!(
        out.contains("objected") && out.contains("too late"),
        "{out}"
    );
    assert!(!out.contains("blocked: too late"), "{out}");
}

/// Where the lines of `run`'s transcript that mark the hooks and the call are, in order.
fn hook_and_call_order(out: &str) -> Vec<&'static str> {
    out.lines()
        .filter_map(|line| {
            if line.contains("hook stdout: PRE-MARK") {
                Some("pre_tool_use")
            } else if line.contains("→ run_shell") {
                Some("call")
            } else if line.contains("← run_shell") {
                Some("result")
            } else if line.contains("hook stdout: POST-MARK") {
                Some("post_tool_use")
            } else {
                None
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn hook_lines_sit_at_the_same_place_beside_the_call_in_every_run() {
    // Issue 40: the reports came through a channel of their own, merged by an unbiased
    // `select!`, so they came before the call in one run and after it in the next.
    let hooks = "      pre_tool_use:\n        - matcher: run_shell\n          command: \"echo PRE-MARK\"\n      post_tool_use:\n        - matcher: run_shell\n          command: \"echo POST-MARK\"\n";
    for attempt in 1..=5 {
        let (server, _f, run) = run_with(&pipeline(hooks), calls(RUNS), |_| ()).await;
        run.expect_code(0);
        assert!(tool_results(&server).contains("RAN-OK"));
        let out = run.stdout();
        assert_eq!(
            hook_and_call_order(&out),
            ["pre_tool_use", "call", "result", "post_tool_use"],
            "run {attempt}:\n{out}"
        );
    }
}
