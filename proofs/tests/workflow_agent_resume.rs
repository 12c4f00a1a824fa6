//! workflow-resume (rule 15), for an agent step: a Rust workflow SIGKILLed while its agent
//! step waits for the model goes on in that step's session when run again with the run it
//! was in, as a YAML step does with `treadle run --resume` (tests/agent_resume.rs). The
//! real workflow binary (src/bin/workflow_child.rs `agent`), the scripted model over
//! loopback, a real SIGKILL:
//!
//! * the model writes `out/a`, `out/b`, `out/c` with one `write_file` call per request, then
//!   says done; its first answer for `out/c` never comes (the stream blocks), and the
//!   process is killed there;
//! * the resumed run asks the request in flight once more (two tool results committed) and
//!   then the last: no committed call is asked again, and the step's output has all three
//!   files, which the shell step after it shows.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// How many tool results a request carries: the calls the model has seen committed.
fn results(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// One `write_file` call per request, then `done`; the first request for `out/c` is
/// answered with a stream that blocks until its client goes.
fn writer() -> Script {
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

fn child(state: &std::path::Path, url: &str, resume: Option<&str>) -> Command {
    let mut cmd = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_treadle-workflow-child")));
    cmd.arg("agent").arg(state).args(resume);
    cmd.current_dir(state.parent().expect("the state file's directory"))
        .env_remove("OPENAI_API_KEY")
        .env("TREADLE_LOCAL_URL", url);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_agent_step_killed_mid_way_goes_on_in_its_session() {
    let server = ScriptedServer::start(writer()).await.expect("server");
    let url = server.base_url().to_owned();
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join(".treadle/state.redb");
    std::fs::create_dir_all(state.parent().expect("parent")).expect("state dir");
    let mut first = child(&state, &url, None)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the workflow");
    assert!(
        server.wait_requests(3, Duration::from_secs(60)).await,
        "the model was never asked for out/c ({} requests)",
        server.request_count()
    );
    first.kill().expect("SIGKILL");
    let status = tokio::task::spawn_blocking(move || first.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(!status.success(), "the first run was killed: {status:?}");
    let before = server.request_count();
    assert_eq!(before, 3, "nothing more was asked before the kill");

    let resumed = tokio::task::spawn_blocking(move || child(&state, &url, Some("1")).output())
        .await
        .expect("join")
        .expect("run the workflow again");
    let out = String::from_utf8_lossy(&resumed.stdout).into_owned();
    let err = String::from_utf8_lossy(&resumed.stderr).into_owned();
    assert!(resumed.status.success(), "{out}\n{err}");
    assert!(
        out.contains("files:ABC"),
        "every file is in the output:\n{out}\n{err}"
    );
    let after: Vec<usize> = server.requests()[before..]
        .iter()
        .map(|r| results(&r.body))
        .collect();
    assert_eq!(
        after,
        vec![2, 3],
        "after the kill: the request in flight once more (two results committed), then the last"
    );
}
