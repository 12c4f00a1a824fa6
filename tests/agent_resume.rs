//! An agent step stopped mid-way goes on where it was with `treadle run --resume`, against
//! the real binary and the scripted model over loopback:
//!
//! * the model writes `out/a`, `out/b` and `out/c` with one `write_file` call per request,
//!   then says it is done; its first answer for `out/c` never comes (the stream blocks),
//!   and the run is stopped there: by SIGKILL, or cleanly by SIGTERM;
//! * `--resume` restores the step's session: the model's request log shows no committed
//!   step asked again (after the stop, no request carries fewer than two tool results),
//!   the request in flight is asked once more and the run finishes;
//! * the files the committed calls wrote are in the step's output, with the last one.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

pub(crate) const PIPELINE: &str = r#"
agents:
  - name: writer
    tools: [write_file]
jobs:
  - name: main
    plan:
      - agent: writer
        name: write
        outputs: [out]
        prompt: Write out/a, out/b and out/c, then say done.
      - task: show
        inputs: [out]
        run: echo "files:$(cat out/a out/b out/c)"
"#;

/// How many tool results a request carries: the calls the model has seen committed.
pub(crate) fn results(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// One `write_file` call per request, then `done`; the first request for `out/c` is
/// answered with a stream that blocks until its client goes.
pub(crate) fn writer() -> Script {
    let mut blocked = false;
    Script::from_fn(move |body| {
        let write = |name: &str| {
            Reply::tool_call(
                "write_file",
                json!({"path": format!("out/{name}"), "content": name.to_uppercase()}),
            )
        };
        match results(body) {
            0 => write("a"),
            1 => write("b"),
            2 if !blocked => {
                blocked = true;
                write("c").block_after(1)
            }
            2 => write("c"),
            _ => Reply::text("done"),
        }
    })
}

fn spawn(f: &Fixture, url: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env_remove("OPENAI_API_KEY")
        .env("TREADLE_LOCAL_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn treadle run")
}

/// Runs the pipeline, stops it with `signal` while the model answers the third request,
/// resumes it, and checks what the resumed run asked and left.
async fn stopped_and_resumed(signal: &str) {
    let server = ScriptedServer::start(writer()).await.expect("server");
    let url = server.base_url().to_owned();
    let f = Fixture::new(PIPELINE);
    let mut child = spawn(&f, &url);
    assert!(
        server.wait_requests(3, Duration::from_secs(60)).await,
        "the model was never asked for out/c ({} requests)",
        server.request_count()
    );
    let stopped = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(!status.success(), "the first run was stopped: {status:?}");
    let before = server.request_count();
    assert_eq!(before, 3, "nothing more was asked before the stop");

    let resumed = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["run", "--resume", "1"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("join");
    let out = resumed.stdout();
    assert_eq!(resumed.code(), 0, "{out}\n{}", resumed.stderr());
    assert!(
        out.contains("its session") && out.contains("goes on"),
        "the transcript says the step went on in its session:\n{out}"
    );
    assert!(
        out.contains("files:ABC"),
        "every file is in the output:\n{out}"
    );
    let after: Vec<usize> = server.requests()[before..]
        .iter()
        .map(|r| results(&r.body))
        .collect();
    assert_eq!(
        after,
        vec![2, 3],
        "after the stop: the request in flight once more (two results committed), then the last"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_step_killed_mid_way_goes_on_in_its_session_with_resume() {
    stopped_and_resumed("-KILL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_step_stopped_cleanly_goes_on_in_its_session_with_resume() {
    stopped_and_resumed("-TERM").await;
}
