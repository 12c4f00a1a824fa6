//! What a run shares across machines over NATS JetStream, against the real binaries
//! (`treadle serve --nats`, `treadle worker`, `nats-server -js` on loopback):
//!
//! * `questions_on_a_worker_are_answered_through_the_server`: an agent step on a worker
//!   whose `permissions:` rule asks, and one that calls `ask_human`, each wait for a person;
//!   both are listed by the server's approvals API, answered there, and the worker goes on
//!   (the approved write lands, the answer reaches the model).
//! * `a_question_left_by_a_killed_server_is_asked_again_when_it_restarts`: the server is
//!   killed (SIGKILL) while a worker's agent step waits on a permission question; started
//!   again on the same state file and NATS, it lists the question, and the approval
//!   reaches the worker: the approved tool call runs.
//! * `a_step_cached_by_one_server_is_found_by_another`: a second server process, with a
//!   state file of its own, runs the same pipeline against the same NATS: the producing
//!   step is not run again (a counter outside the workspace), and the step after it reads
//!   the output tree the first server's run made.
//! * `a_cache_record_larger_than_a_nats_message_is_shared`: the same with an output of
//!   12,000 files, whose record is over a NATS message's 1 MB: shared through the object
//!   store.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Fixture;
use common::nats::{Nats, Worker, lines, wait_status};
use common::server::{Server, get, post};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

/// The first pending approval of the server whose message contains `text`.
async fn pending(s: &Server, text: &str) -> Value {
    let started = Instant::now();
    loop {
        let (_, list) = get(s, "/api/v1/approvals?state=pending").await;
        let found = list
            .as_array()
            .and_then(|l| l.iter().find(|a| a.to_string().contains(text)).cloned());
        if let Some(a) = found {
            return a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never pending: {text:?}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The writer asks to write a note (a permission question); the painter asks a person
/// which color (an `ask_human` question), then repeats the answer.
fn two_agents(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let tool = messages.iter().find(|m| m["role"] == "tool");
    let painter = body.to_string().contains("Paint the shed");
    match (painter, tool) {
        (true, Some(t)) => Reply::text(format!(
            "you said: {}",
            t["content"].as_str().unwrap_or_default()
        )),
        (true, None) => Reply::tool_calls([ToolCall::new(
            "ask_human",
            json!({ "question": "Which color?", "choices": ["red", "blue"] }),
        )]),
        (false, Some(_)) => Reply::text("Done."),
        (false, None) => Reply::tool_call(
            "write_file",
            json!({"path": "notes/n.md", "content": "HELLO-NOTE"}),
        ),
    }
}

const ASKING: &str = "agents:\n  - name: writer\n    tools: [write_file]\n    permissions:\n      rules:\n        - { tool: write_file, matches: { path: \"^notes/\" }, action: ask }\n      default: { deny: \"not on the list\" }\n  - name: painter\n    tools: [ask_human]\njobs:\n  - name: j\n    plan:\n      - agent: writer\n        name: write\n        prompt: Write the note.\n        timeout: 60s\n        outputs: [notes]\n      - task: show\n        inputs: [notes]\n        confined: false\n        run: cat notes/n.md > SEEN\n      - agent: painter\n        name: paint\n        prompt: Paint the shed. Ask which color.\n        timeout: 60s\n";

#[tokio::test(flavor = "multi_thread")]
async fn questions_on_a_worker_are_answered_through_the_server() {
    let Some(nats) = Nats::start("questions_on_a_worker_are_answered_through_the_server") else {
        return;
    };
    let model = ScriptedServer::start(Script::from_fn(two_agents))
        .await
        .expect("scripted server");
    let url = model.base_url().to_string();
    let outside = tempfile::tempdir().expect("temp dir");
    let seen = outside.path().join("seen");
    let f = Fixture::new(&ASKING.replace("SEEN", &seen.display().to_string()));
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let worker = Worker::start(&nats.url, 2, &f.path().join("w"), &env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    // The permission question, asked on the worker, is the server's to answer.
    let asked = pending(&server, "permission").await;
    assert_eq!(asked["run"], run, "{asked}");
    let path = format!("/api/v1/runs/{run}/approvals/{}", asked["seq"]);
    let (code, decided) = post(&server, &path, json!({"decision": "approve", "by": "ops"})).await;
    assert_eq!(code, 200, "{decided}");
    // Then the painter's question.
    let question = pending(&server, "Which color?").await;
    let path = format!("/api/v1/runs/{run}/approvals/{}", question["seq"]);
    let (code, refused) = post(
        &server,
        &path,
        json!({"decision": "answer", "value": "green"}),
    )
    .await;
    assert_eq!(
        code, 422,
        "a value outside the choices is refused: {refused}"
    );
    let (code, answered) = post(
        &server,
        &path,
        json!({"decision": "answer", "value": "blue"}),
    )
    .await;
    assert_eq!(code, 200, "{answered}");
    let done = wait_status(&server, run, Duration::from_secs(120)).await;
    assert_eq!(
        done["status"],
        "succeeded",
        "{done}\nworker: {}",
        worker.log()
    );
    assert_eq!(
        lines(&seen),
        vec!["HELLO-NOTE"],
        "the approved write landed"
    );
    let last = model.requests().last().expect("requests").body.clone();
    let tool = last["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .cloned()
        .expect("the tool result");
    assert_eq!(
        tool["content"],
        json!("blue"),
        "the answer reached the model"
    );
    // The answers are the server's records, as for a step it runs itself.
    let (_, all) = get(&server, "/api/v1/approvals").await;
    let by: Vec<String> = all
        .as_array()
        .map(|l| l.iter().map(|a| a["by"].to_string()).collect())
        .unwrap_or_default();
    assert!(by.iter().any(|b| b.contains("ops")), "{all}");
    drop(nats);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_left_by_a_killed_server_is_asked_again_when_it_restarts() {
    let Some(nats) =
        Nats::start("a_question_left_by_a_killed_server_is_asked_again_when_it_restarts")
    else {
        return;
    };
    let model = common::nats::calling("note", "Noted.").await;
    let url = model.base_url().to_string();
    let outside = tempfile::tempdir().expect("temp dir");
    let noted = outside.path().join("noted");
    let f = Fixture::new(&format!(
        "agents:\n  - name: noter\n    tools:\n      - name: note\n        description: Notes.\n        run: echo noted >> {}\n    permissions:\n      rules:\n        - {{ tool: note, action: ask }}\njobs:\n  - name: j\n    plan:\n      - agent: noter\n        name: note\n        confined: false\n        timeout: 120s\n        prompt: Note it.\n",
        noted.display()
    ));
    let env = [("TREADLE_LOCAL_URL", url.as_str())];
    let args = ["treadle.yml", "--nats", &nats.url];
    let mut first = Server::start(f.path(), &args, &env);
    let worker = Worker::start(&nats.url, 1, &f.path().join("w"), &env);
    let (code, body) = post(&first, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    pending(&first, "permission").await;
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    let again = Server::start(f.path(), &args, &env);
    let asked = pending(&again, "permission").await;
    let path = format!("/api/v1/runs/{}/approvals/{}", asked["run"], asked["seq"]);
    let (code, decided) = post(&again, &path, json!({"decision": "approve", "by": "ops"})).await;
    assert_eq!(code, 200, "{decided}");
    let started = Instant::now();
    while lines(&noted).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the approval never reached the worker: {}",
            worker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lines(&noted), vec!["noted"], "the approved call ran once");
    drop(nats);
}

/// A producer noting each run of it in `counter` (and making `extra` empty files beside
/// its output), and a volatile step after it noting what it read in `seen`.
fn producing(counter: &Path, seen: &Path, extra: usize) -> String {
    format!(
        "jobs:\n  - name: j\n    plan:\n      - task: build\n        outputs: [out]\n        confined: false\n        run: echo built >> {c}; echo hello > out/file; for i in $(seq {extra}); do true > out/f$i; done\n      - task: read\n        inputs: [out]\n        volatile: true\n        confined: false\n        run: cat out/file >> {s}; ls out | wc -l >> {s}\n",
        c = counter.display(),
        s = seen.display()
    )
}

/// Runs the producing pipeline (with `extra` files) on two servers with state files of
/// their own, one worker, one NATS: the second server must find the step cached.
async fn cached_across_servers(test: &str, extra: usize) {
    let Some(nats) = Nats::start(test) else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let (counter, seen) = (outside.path().join("counter"), outside.path().join("seen"));
    let (first, second) = (
        Fixture::new(&producing(&counter, &seen, extra)),
        Fixture::new(&producing(&counter, &seen, extra)),
    );
    let _worker = Worker::start(&nats.url, 2, &first.path().join("w"), &[]);
    for (n, f) in [&first, &second].into_iter().enumerate() {
        let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
        let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
        assert_eq!(code, 201, "{body}");
        let run = body["id"].as_u64().expect("id");
        let done = wait_status(&server, run, Duration::from_secs(180)).await;
        assert_eq!(done["status"], "succeeded", "server {n}: {done}");
        drop(server);
    }
    assert_eq!(
        lines(&counter),
        vec!["built"],
        "the second server found it cached"
    );
    let files = (extra + 1).to_string();
    assert_eq!(
        lines(&seen),
        vec!["hello", &files, "hello", &files],
        "the step after it read the tree the first run made"
    );
    drop(nats);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_cached_by_one_server_is_found_by_another() {
    cached_across_servers("a_step_cached_by_one_server_is_found_by_another", 0).await;
}

/// An output of 12,000 files: its record (the manifest) is larger than a NATS message
/// (1 MB), so it is shared through the object store.
#[tokio::test(flavor = "multi_thread")]
async fn a_cache_record_larger_than_a_nats_message_is_shared() {
    cached_across_servers(
        "a_cache_record_larger_than_a_nats_message_is_shared",
        12_000,
    )
    .await;
}
