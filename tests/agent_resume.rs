//! An agent step stopped mid-way goes on where it was with `treadle run --resume`, against
//! the real binary and the scripted model over loopback:
//!
//! * the model writes `out/a`, `out/b` and `out/c` with one `write_file` call per request,
//!   then says it is done; its first answer for `out/c` never comes (the stream blocks),
//!   and the run is stopped there: by SIGKILL, or cleanly by SIGTERM;
//! * `--resume` restores the step's session: the model's request log shows no committed
//!   step asked again (after the stop, no request carries fewer than two tool results),
//!   the request in flight is asked once more and the run finishes;
//! * the files the committed calls wrote are in the step's output, with the last one, and
//!   the resumed run's transcript shows each of the three calls once.

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
    spawn_bin(std::path::Path::new(env!("CARGO_BIN_EXE_treadle")), f, url)
}

fn spawn_bin(bin: &std::path::Path, f: &Fixture, url: &str) -> Child {
    Command::new(bin)
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
    // The resumed run's transcript shows what the step committed before the stop (read
    // from its session's journal) and the call it made after, each once.
    for file in ["out/a", "out/b", "out/c"] {
        let calls = out
            .lines()
            .filter(|l| l.contains("→ write_file") && l.contains(file))
            .count();
        assert_eq!(calls, 1, "`{file}`'s call shown once:\n{out}");
    }
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

/// Figures for docs/benchmarks.md (`cargo test --test integration -- --ignored
/// agent_resume::figures --nocapture`): an agent step with 250 committed model steps (a
/// `write_file` call each; its `max_turns` lets it make that many calls) is killed while the
/// model answers the 251st; the time from starting `treadle run --resume` to the model
/// being asked again (restart to running), and the cost of the one synced write a step's
/// session adds (its `step_sessions` row). `TREADLE_FIGURES_BIN` measures another build of
/// the binary (a release one) in the same scenario; the figures name the one measured.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: prints figures"]
async fn figures_restart_to_running_after_committed_steps() {
    const STEPS: usize = 250;
    let bin = std::env::var_os("TREADLE_FIGURES_BIN").map_or_else(
        || env!("CARGO_BIN_EXE_treadle").into(),
        std::path::PathBuf::from,
    );
    let mut blocked = false;
    let script = Script::from_fn(move |body| match results(body) {
        // Each call its own arguments: the session stops a model repeating one call.
        n if n < STEPS => Reply::tool_call(
            "write_file",
            json!({"path": format!("f{n}"), "content": "x"}),
        ),
        _ if !blocked => {
            blocked = true;
            Reply::text("done").block_after(1)
        }
        _ => Reply::text("done"),
    });
    let server = ScriptedServer::start(script).await.expect("server");
    let url = server.base_url().to_owned();
    let f = Fixture::new(&format!(
        "agents:\n  - name: lister\n    tools: [write_file]\n    max_turns: {}\njobs:\n  - name: main\n    plan:\n      - agent: lister\n        name: list\n        prompt: List the directory {STEPS} times.\n",
        STEPS + 10
    ));
    let first = std::time::Instant::now();
    let mut child = spawn_bin(&bin, &f, &url);
    while server.request_count() < STEPS + 1 {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the run ended after {} requests",
            server.request_count()
        );
        assert!(first.elapsed() < Duration::from_secs(1800), "too slow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ran = first.elapsed();
    child.kill().expect("kill");
    let _ = child.wait();
    let t0 = std::time::Instant::now();
    let said = f.path().join("resume.log");
    let out = std::fs::File::create(&said).expect("log");
    let mut resumed = Command::new(&bin)
        .args(["run", "--resume", "1"])
        .current_dir(f.path())
        .env_remove("OPENAI_API_KEY")
        .env("TREADLE_LOCAL_URL", &url)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn the resume");
    assert!(
        server
            .wait_requests(STEPS + 2, Duration::from_secs(120))
            .await
    );
    let restart = t0.elapsed();
    let status = resumed.wait().expect("wait");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&said).unwrap_or_default()
    );
    assert_eq!(
        server.request_count(),
        STEPS + 2,
        "no committed step asked again"
    );
    // One step_sessions row, synced, as each agent step writes it.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = treadle::run::Store::open(&dir.path().join("state.redb")).expect("store");
    let rounds = 200;
    let t1 = std::time::Instant::now();
    for i in 0..rounds {
        let row = treadle::run::step_sessions::StepSession {
            session: treadle_session::event::SessionId::new(),
            key: None,
            dir: dir.path().to_path_buf(),
        };
        treadle::run::step_sessions::note(&store.database(), i, "0", &row).expect("note");
    }
    let note = t1.elapsed() / rounds as u32;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{{\"binary\": \"{}\", \"committed_steps\": {STEPS}, \"first_run_to_step_ms\": {}, \"per_step_ms\": {:.2}, \"restart_to_running_ms\": {}, \"step_session_row_us\": {}, \"loadavg\": \"{}\"}}",
        bin.display(),
        ran.as_millis(),
        ran.as_secs_f64() * 1000.0 / STEPS as f64,
        restart.as_millis(),
        note.as_micros(),
        load.trim()
    );
}
