//! The agent step keys against the scripted server: `dir:` (tool paths relative to it),
//! `context_paths:` (files in the first message), a step's own `max_turns:` (and the tool
//! calls it allows), the run-time
//! `prompt_file: { artifact, path }`, and the refusal of tools treadle cannot run yet.

use crate::common;

use common::{Fixture, Run};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Runs `treadle test` on `yaml` against a server playing `replies`; the run and every
/// request body the server saw.
async fn test_scripted(yaml: &str, replies: Vec<Reply>) -> (Run, Vec<String>) {
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("server");
    let f = Fixture::new(yaml);
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["test"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("treadle");
    let bodies = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    (run, bodies)
}

fn passed(run: &Run) {
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dir_and_context_paths_shape_where_the_agent_works_and_what_it_starts_with() {
    let (run, bodies) = test_scripted(
        r#"
agents:
- name: reader
jobs:
- name: inspect
  plan:
  - task: fetch
    outputs: [repo]
    run: |
      mkdir -p repo/cmd
      echo 'package main' > repo/cmd/main.go
      echo 'always run go vet before committing' > repo/CONVENTIONS.md
  - agent: reader
    inputs: [repo]
    dir: repo
    context_paths: [CONVENTIONS.md]
    prompt: "What package does main.go declare?"
    assert:
      tool_calls:
      - name: read_file
        args: { path: cmd/main.go }
      stdout: package main
  assert:
    execution: [fetch, reader]
    outcome: succeeded
"#,
        vec![
            Reply::tool_call("read_file", json!({"path": "cmd/main.go"})),
            Reply::text("It declares package main, and you run go vet."),
        ],
    )
    .await;
    passed(&run);
    // The conventions were in the very first request, as a `read_file` call and its result
    // after the instruction (steps' turn zero), before the model made any call ...
    let first: serde_json::Value = serde_json::from_str(&bodies[0]).expect("JSON body");
    let messages = first["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{first}");
    assert!(
        messages[0]["content"]
            .as_str()
            .is_some_and(|t| t.contains("What package") && !t.contains("go vet")),
        "{first}"
    );
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read_file", "{first}");
    let arguments: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("arguments"))
            .expect("JSON arguments");
    assert_eq!(arguments, json!({"path": "CONVENTIONS.md"}));
    assert_eq!(messages[2]["tool_call_id"], call["id"], "{first}");
    assert_eq!(
        messages[2]["content"], "always run go vet before committing\n",
        "{first}"
    );
    // ... and `cmd/main.go`, relative to `dir: repo`, was read.
    assert!(bodies[1].contains("package main"), "{}", bodies[1]);
    // The transcript says what was handed over; the handing is not one of the model's calls.
    assert!(
        run.stdout()
            .contains(r#"handed over before the first turn: read_file {"path":"CONVENTIONS.md"}"#),
        "{}",
        run.stdout()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_file_over_its_cap_is_cut_with_a_note_and_is_not_a_call_of_the_model() {
    let server = ScriptedServer::start(Script::new(vec![Reply::text("Notes summarised.")]))
        .await
        .expect("server");
    // The assert wants a `read_file` call of the model, which it never made: the call that
    // handed the file over is treadle's, so the step fails.
    let yaml = r#"
agents:
- name: reader
jobs:
- name: inspect
  plan:
  - task: fetch
    outputs: [repo]
    run: printf 'line one\nline two\nline three\n' > repo/NOTES.md
  - agent: reader
    inputs: [repo]
    context_paths: [repo/NOTES.md]
    max_context_bytes: 12
    prompt: "Summarise the notes."
    assert:
      tool_calls:
      - name: read_file
"#;
    let (_f, run) = common::Fixture::new(yaml).run_at(server.base_url()).await;
    run.expect_code(1);
    assert!(run.stdout().contains("read_file"), "{}", run.stdout());
    let requests = server.requests();
    let handed = requests[0].body["messages"][2]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        handed.starts_with("line one\nlin\n[cut at 12 of 29 bytes"),
        "{handed}"
    );
    assert!(handed.contains("read_file, offset=2"), "{handed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_context_file_fails_the_step_before_any_model_call() {
    let (run, bodies) = test_scripted(
        r#"
agents:
- name: reader
jobs:
- name: inspect
  plan:
  - task: fetch
    outputs: [repo]
    run: mkdir -p repo
  - agent: reader
    inputs: [repo]
    context_paths: [repo/ABSENT.md]
    prompt: "Read it."
"#,
        vec![Reply::text("unreachable")],
    )
    .await;
    assert_ne!(run.code(), 0);
    assert!(run.stdout().contains("context_paths"), "{}", run.stdout());
    assert!(bodies.is_empty(), "{bodies:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steps_max_turns_wins_over_its_agents() {
    let yaml = |step_turns: &str| {
        format!(
            r#"
agents:
- name: lister
  tools: [list_dir]
  max_turns: 1
jobs:
- name: j
  plan:
  - agent: lister
    {step_turns}
    prompt: "List twice, then answer."
    assert: {{ stdout: listed }}
  assert: {{ execution: [lister], outcome: succeeded }}
"#
        )
    };
    let replies = || {
        vec![
            Reply::tool_call("list_dir", json!({"path": "."})),
            Reply::tool_call("list_dir", json!({"path": "."})),
            Reply::text("listed"),
        ]
    };
    let (run, _) = test_scripted(&yaml("max_turns: 3"), replies()).await;
    passed(&run);
    // The agent's own limit of one model call cannot get there.
    let (run, _) = test_scripted(&yaml(""), replies()).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
}

/// A step given more than 256 turns may make more than 256 tool calls (the library's own
/// bound on a turn's calls follows `max_turns`); with the default 30 turns the bound of 256
/// calls still ends the step. The model makes 20 calls a request, 14 times, then answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_given_more_turns_than_256_may_make_more_tool_calls() {
    let yaml = |step_turns: &str| {
        format!(
            r#"
agents:
- name: writer
  tools: [write_file]
jobs:
- name: j
  plan:
  - agent: writer
    {step_turns}
    prompt: "Write 280 files, then say done."
    assert: {{ stdout: done }}
"#
        )
    };
    let replies = || {
        let batch = |i: usize| {
            Reply::tool_calls((0..20).map(move |j| {
                treadle_scripted::ToolCall::new(
                    "write_file",
                    json!({"path": format!("f{i}-{j}"), "content": "x"}),
                )
            }))
        };
        let mut replies: Vec<Reply> = (0..14).map(batch).collect();
        replies.push(Reply::text("done"));
        replies
    };
    let (run, bodies) = test_scripted(&yaml("max_turns: 300"), replies()).await;
    passed(&run);
    assert_eq!(bodies.len(), 15, "every call made, then the answer");
    let (run, bodies) = test_scripted(&yaml(""), replies()).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    assert!(
        run.stdout().contains("limit of 256 tool calls"),
        "{}",
        run.stdout()
    );
    assert_eq!(bodies.len(), 13, "the 13th batch passes 256 calls");
}

#[tokio::test(flavor = "multi_thread")]
async fn prompt_file_from_an_artifact_is_read_when_the_step_runs() {
    let (run, bodies) = test_scripted(
        r#"
agents:
- name: reviewer
jobs:
- name: review
  plan:
  - task: fetch
    outputs: [repo]
    run: mkdir -p repo/.ci && echo 'Review this change for correctness.' > repo/.ci/REVIEW.md
  - agent: reviewer
    inputs: [repo]
    prompt_file: { artifact: repo, path: .ci/REVIEW.md }
    assert: { stdout: The change is correct }
  assert:
    execution: [fetch, reviewer]
    outcome: succeeded
"#,
        vec![Reply::text("The change is correct.")],
    )
    .await;
    passed(&run);
    assert!(
        bodies[0].contains("Review this change for correctness."),
        "{}",
        bodies[0]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_treadle_cannot_run_yet_refuses_the_step_by_name() {
    let (run, bodies) = test_scripted(
        r#"
mcp_servers:
- name: tracker
  endpoint: http://127.0.0.1:9/mcp
  auth: { type: oauth }
agents:
- name: reviewer
  tools:
  - read_file
  - mcp: tracker
jobs:
- name: review
  plan:
  - agent: reviewer
    prompt: "Review and post."
"#,
        vec![Reply::text("unreachable")],
    )
    .await;
    assert_ne!(run.code(), 0);
    assert!(
        run.stdout().contains("auth: { type: oauth }") || run.stderr().contains("oauth"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
    assert!(bodies.is_empty(), "{bodies:?}");
}

const FIXED_TASK: &str = r#"
agents:
- name: fixer
  tools: [write_file]
jobs:
- name: build
  plan:
  - task: check
    run: test -f config.json
    fix: fixer
  assert:
    execution: [fixer, check]
    outcome: succeeded
"#;

#[tokio::test(flavor = "multi_thread")]
async fn fix_hands_a_failed_task_to_its_agent_then_runs_the_command_again() {
    let (run, bodies) = test_scripted(
        FIXED_TASK,
        vec![
            Reply::tool_call(
                "write_file",
                json!({"path": "config.json", "content": "{}"}),
            ),
            Reply::text("Created config.json."),
        ],
    )
    .await;
    passed(&run);
    // The fixer was told the command that failed.
    assert!(bodies[0].contains("test -f config.json"), "{}", bodies[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fixer_that_repairs_nothing_leaves_the_task_failed_and_a_green_task_never_starts_it() {
    let (run, bodies) = test_scripted(FIXED_TASK, vec![Reply::text("I looked; all fine.")]).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let green = FIXED_TASK
        .replace("test -f config.json", "'true'")
        .replace("[fixer, check]", "[check]");
    let (run, bodies) = test_scripted(&green, vec![Reply::text("unreachable")]).await;
    passed(&run);
    assert!(bodies.is_empty(), "{bodies:?}");
}

/// A fixer that fails by its own doing (here its `max_turns: 1` runs out after it wrote
/// the file) is a notice of the run, not the task's failure: the command runs again and
/// that run decides the step, as `fix:` promises. Only a fixer that could not run at all
/// (its model down, its key missing) fails the task.
#[tokio::test(flavor = "multi_thread")]
async fn a_fixer_that_fails_by_its_own_doing_is_a_notice_and_the_rerun_decides() {
    let yaml = FIXED_TASK.replace(
        "  tools: [write_file]\n",
        "  tools: [write_file]\n  max_turns: 1\n",
    );
    let (run, bodies) = test_scripted(
        &yaml,
        vec![
            Reply::tool_call(
                "write_file",
                json!({"path": "config.json", "content": "{}"}),
            ),
            Reply::text("Created config.json."),
        ],
    )
    .await;
    assert_eq!(
        bodies.len(),
        1,
        "the fixer stopped at its limit: {bodies:?}"
    );
    let out = run.stdout();
    assert!(out.contains("fix: agent `fixer` failed:"), "{out}");
    passed(&run);
}
