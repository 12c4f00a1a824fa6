//! Human input in pipelines: an `input:` step and an agent's `ask_human` call, each answered
//! with `treadle answer` from a second process while the run waits. An answer that does not
//! fit the question's schema is refused (exit 2, the reason, the question still open); a
//! valid one continues the run and reaches the next step, or the model.

use crate::common;

use common::{Fixture, Run, spawn_run, wait_until_asked};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

const INPUT: &str = "jobs:\n  - name: deploy\n    plan:\n      - input: replicas\n        question: How many replicas?\n        schema: { type: integer, minimum: 1, maximum: 9 }\n        timeout: 60s\n        outputs: [answer]\n      - task: scale\n        inputs: [answer]\n        run: echo \"scaling to $(cat answer/answer.json)\"\n";

#[test]
fn an_invalid_answer_is_refused_and_a_valid_one_continues_the_run() {
    let f = Fixture::new(INPUT);
    let child = spawn_run(&f, &[]);
    wait_until_asked(&f, "replicas");

    let refused = f.treadle(&["answer", "1", "replicas", "--json", "\"lots\""]);
    refused.expect_code(2);
    assert!(
        refused.stderr().contains("refused") && refused.stderr().contains("integer"),
        "{}",
        refused.stderr()
    );
    let too_many = f.treadle(&["answer", "1", "0", "--json", "12"]);
    too_many.expect_code(2);
    let not_json = f.treadle(&["answer", "1", "0", "--json", "three"]);
    not_json.expect_code(2);
    assert!(
        not_json.stderr().contains("not JSON"),
        "{}",
        not_json.stderr()
    );
    // Still open after the refusals.
    assert!(f.treadle(&["approvals"]).stdout().contains("replicas"));

    let answered = f.treadle(&["answer", "1", "replicas", "--json", "3"]);
    answered.expect_code(0);
    assert!(
        answered
            .stdout()
            .contains("answered run 1 step 0 (replicas)")
    );
    let run = Run(child.wait_with_output().expect("wait"));
    run.expect_code(0);
    assert!(run.stdout().contains("scaling to 3"), "{}", run.stdout());
    assert!(f.treadle(&["approvals"]).stdout().contains("no approvals"));
}

#[test]
fn the_default_is_taken_at_the_deadline_and_without_one_the_step_fails() {
    let f = Fixture::new(
        "plan:\n  - input: name\n    question: Your name?\n    timeout: 300ms\n    default: nobody\n    outputs: [who]\n  - task: greet\n    inputs: [who]\n    run: cat who/answer.json\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(run.stdout().contains("\"nobody\""), "{}", run.stdout());

    let f = Fixture::new(
        "plan:\n  - input: name\n    question: Your name?\n    timeout: 300ms\n    outputs: [who]\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    assert!(
        run.stdout().contains("no answer before its timeout"),
        "{}",
        run.stdout()
    );

    // Headless and without a deadline, nobody could answer: it fails at once (fail closed).
    let f = Fixture::new("plan:\n  - input: name\n    question: Your name?\n    outputs: [who]\n");
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    assert!(run.stdout().contains("headless"), "{}", run.stdout());
}

#[test]
fn bad_input_steps_are_refused_at_load_with_the_place_and_a_fix() {
    let f = Fixture::new(
        "plan:\n  - input: n\n    question: How many?\n    schema: { type: integer }\n    default: many\n    outputs: [a]\n  - input: m\n    question: Which?\n    outputs: [b]\n    schema: { type: 12 }\n  - input: q\n    outputs: [c]\n",
    );
    let out = f.treadle(&["validate"]);
    out.expect_code(2);
    let text = out.stdout() + &out.stderr();
    assert!(text.contains("`default:`"), "{text}");
    assert!(text.contains("`schema:`"), "{text}");
    assert!(text.contains("no `question:`"), "{text}");
}

/// The model asks a person, then repeats what it read.
fn asking_agent(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    match messages.iter().find(|m| m["role"] == "tool") {
        Some(tool) => Reply::text(format!(
            "you said: {}",
            tool["content"].as_str().unwrap_or_default()
        )),
        None => Reply::tool_calls([ToolCall::new(
            "ask_human",
            json!({ "question": "Which color?", "choices": ["red", "blue"] }),
        )]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asks_a_person_and_the_answer_reaches_the_model() {
    let server = ScriptedServer::start(Script::from_fn(asking_agent))
        .await
        .expect("server");
    let url = server.base_url().to_owned();
    let f = Fixture::new(
        "agents:\n  - name: painter\n    tools: [ask_human]\njobs:\n  - name: paint\n    plan:\n      - agent: painter\n        prompt: Paint the shed. Ask which color.\n        timeout: 60s\n",
    );
    let (f, run) = tokio::task::spawn_blocking(move || {
        let child = spawn_run(&f, &[("TREADLE_LOCAL_URL", &url)]);
        wait_until_asked(&f, "painter");
        let refused = f.treadle(&["answer", "1", "painter", "--json", "\"green\""]);
        refused.expect_code(2);
        assert!(refused.stderr().contains("\"red\""), "{}", refused.stderr());
        f.treadle(&["answer", "1", "painter", "--json", "\"blue\""])
            .expect_code(0);
        (f, Run(child.wait_with_output().expect("wait")))
    })
    .await
    .expect("thread");
    run.expect_code(0);
    assert!(run.stdout().contains("you said: blue"), "{}", run.stdout());
    let requests = server.requests();
    let last = &requests.last().expect("requests").body;
    let tool = last["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .expect("the tool result");
    assert_eq!(tool["content"], json!("blue"));
    drop(f);
}
