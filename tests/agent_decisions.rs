//! What an agent step did can be trusted (issue 26), through `treadle run` against the
//! scripted model over real HTTP: a verdict sent with calls whose results the model had not
//! seen is not taken, `tool_calls:` asserts with `ok: true` take only calls that succeeded,
//! calls after the decision are shown as not run in the live and the replayed transcript,
//! and the verdict tool takes steps' `choice` and `note`.

use crate::common;

use common::{Fixture, example};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

/// The `tool` messages of request `n` the server saw, in order.
fn tool_results(server: &ScriptedServer, n: usize) -> Vec<String> {
    server.requests()[n].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verdict_sent_with_unseen_evidence_is_not_taken_and_the_next_turn_decides() {
    let server = ScriptedServer::start(Script::new([
        // examples/review.yml's failure: read, write and decide in one batch.
        Reply::tool_calls([
            ToolCall::new("read_file", json!({"path": "draft/notes.md"})),
            ToolCall::new(
                "write_file",
                json!({"path": "report/summary.md", "content": "Fine notes."}),
            ),
            ToolCall::new("verdict", json!({"choice": "reject", "note": "unread"})),
        ]),
        Reply::tool_call("verdict", json!({"choice": "approve", "note": "read them"})),
        Reply::text("Approved."),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(&example("review.yml"));
    let (_f, run) = f.run_at(server.base_url()).await;
    let out = run.stdout();
    run.expect_code(0);
    assert!(out.contains("verdict approve"), "{out}");
    assert!(out.contains("escalate skipped"), "{out}");
    // The evidence calls ran; the early verdict was answered, not taken.
    let results = tool_results(&server, 1);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].contains("faster startup"), "{results:?}");
    assert!(
        results[2].starts_with(
            "not taken: this decision came in the same batch as read_file, write_file"
        ),
        "{results:?}"
    );
    assert_eq!(server.requests().len(), 3);
}

const EDITOR: &str = r#"
agents:
  - name: editor
    tools: [read_file, edit_file]
jobs:
  - name: edit
    plan:
      - task: seed
        outputs: [proj]
        run: printf 'def add(a, b):\n    return a - b\n' > proj/calc.py
      - agent: editor
        inputs: [proj]
        prompt: Fix proj/calc.py.
        assert:
          tool_calls:
            - name: edit_file
              args: { path: proj/calc.py }
              ok: true
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_call_does_not_satisfy_an_ok_tool_calls_assert() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "edit_file",
            json!({"path": "proj/calc.py", "old_string": "a * b", "new_string": "a + b"}),
        ),
        Reply::text("Fixed."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(EDITOR).run_at(server.base_url()).await;
    run.expect_code(1);
    let out = run.stdout();
    assert!(
        out.contains(r#"assert tool_calls: expected call #1 edit_file {"path":"proj/calc.py"} to succeed, but edit_file {"new_string":"a + b","old_string":"a * b","path":"proj/calc.py"} failed:"#),
        "{out}"
    );

    // The same call that succeeds passes.
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "edit_file",
            json!({"path": "proj/calc.py", "old_string": "a - b", "new_string": "a + b"}),
        ),
        Reply::text("Fixed."),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(EDITOR).run_at(server.base_url()).await;
    run.expect_code(0);
}

const DECIDER: &str = r#"
agents:
  - name: decider
    tools: [list_dir]
jobs:
  - name: decide
    plan:
      - agent: decider
        prompt: Decide.
        verdicts:
          - approve: done
          - reject: done
      - task: done
        run: echo finished
"#;

#[tokio::test(flavor = "multi_thread")]
async fn calls_after_the_decision_show_as_not_run_live_and_when_replayed() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("verdict", json!({"choice": "approve", "note": "fine"})),
        // The turn's last call: its tool calls are not run.
        Reply::text("Approved.").with_tool_calls([ToolCall::new("list_dir", json!({}))]),
    ]))
    .await
    .expect("server");
    let (f, run) = Fixture::new(DECIDER).run_at(server.base_url()).await;
    run.expect_code(0);
    let live = run.stdout();
    // Not run is not failed: a succeeded step shows no ✗ for it.
    assert!(
        live.contains("· list_dir: not run: the turn was over") && !live.contains("✗ list_dir"),
        "{live}"
    );
    // Run again: the step is cached and its transcript replayed, with the same marks, each
    // call with its arguments and result, before the answer.
    let (_f, again) = f.run_at(server.base_url()).await;
    again.expect_code(0);
    let replayed = again.stdout();
    assert!(replayed.contains("cached"), "{replayed}");
    assert!(
        replayed.contains("· list_dir: not run: the turn was over"),
        "{replayed}"
    );
    let call = replayed.find("→ verdict {").unwrap_or(usize::MAX);
    let result = replayed.find("← verdict:").unwrap_or(usize::MAX);
    let answer = replayed.find("Approved.").unwrap_or(0);
    assert!(
        replayed.contains("\"choice\":\"approve\"") && call < result && result < answer,
        "the replay lost the call's arguments or result, or put the answer first:\n{replayed}"
    );
    assert_eq!(
        server.requests().len(),
        2,
        "the replay asked the model nothing"
    );
}

/// A one-agent pipeline whose agent step carries `step_keys` (YAML, indented for the step).
fn one_agent(defaults: &str, step_keys: &str) -> String {
    format!(
        "{defaults}agents:\n  - name: a\n    tools: [list_dir]\njobs:\n  - name: j\n    plan:\n      - agent: a\n        prompt: Say hi.\n{step_keys}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_counts_requests_to_the_provider_with_the_clients_retries() {
    // `attempts: 1` is one request: a 500 fails the step without a retry.
    let server = ScriptedServer::start(Script::new([Reply::status(500), Reply::text("hi")]))
        .await
        .expect("server");
    let yaml = one_agent("", "        attempts: 1\n");
    let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    assert!(run.stdout().contains("HTTP 500"), "{}", run.stdout());
    assert_eq!(server.request_count(), 1, "{}", run.stdout());

    // `attempts: 2`: the 500 is retried once, inside the same conversation.
    let server = ScriptedServer::start(Script::new([Reply::status(500), Reply::text("hi")]))
        .await
        .expect("server");
    let yaml = one_agent("", "        attempts: 2\n");
    let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    assert_eq!(server.request_count(), 2, "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_is_no_limit_and_preflight_can_be_disabled() {
    let server = ScriptedServer::start(Script::new([Reply::text("hi there")]))
        .await
        .expect("server");
    let yaml = one_agent(
        "defaults:\n  preflight:\n    disabled: true\n",
        "        timeout: \"0\"\n        max_turns: 0\n        assert:\n          stdout: hi there\n",
    );
    let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    assert_eq!(server.request_count(), 1);
}

const FORCED: &str = r#"
agents:
  - name: judge
    source: { model: local/scripted, string_tool_choice: STRING }
    tools: [list_dir]
jobs:
  - name: j
    plan:
      - agent: judge
        prompt: Decide.
        verdicts: [approve, reject]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_verdict_is_forced_through_tool_choice_then_the_model_chooses_again() {
    for (string, expected) in [
        (
            "false",
            json!({"type": "function", "function": {"name": "verdict"}}),
        ),
        ("true", json!("required")),
    ] {
        let server = ScriptedServer::start(Script::new([
            Reply::text("I think it is fine."),
            Reply::tool_call("verdict", json!({"choice": "approve", "note": "fine"})),
            Reply::text("Approved."),
        ]))
        .await
        .expect("server");
        let yaml = FORCED.replace("STRING", string);
        let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
        run.expect_code(0);
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{}", run.stdout());
        assert!(
            requests[0].body.get("tool_choice").is_none(),
            "the first call is free"
        );
        assert_eq!(
            requests[1].body["tool_choice"], expected,
            "string_tool_choice: {string}"
        );
        assert!(
            requests[2].body.get("tool_choice").is_none(),
            "after the forced call the model chooses again"
        );
        assert!(run.stdout().contains("verdict approve"), "{}", run.stdout());
    }
}
