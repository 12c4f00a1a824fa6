//! Hooks' processes, real ones under `treadle run`: a guard that prints its deny and
//! leaves children holding its output (one in a session of its own) denies, and its
//! children die with it; a hook's `setsid` child dies when treadle is killed with SIGKILL
//! (hooks run under the keeper, as tasks do), and when the keeper is killed with treadle,
//! `--resume` finds the child by the run's mark and stops it before the step runs again.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Fixture;
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A `pre_tool_use` guard on `run_shell` running `command`, with `timeout`.
fn guarded(command: &str, timeout: &str) -> String {
    format!(
        "agents:\n  - name: sh\n    tools: [run_shell]\n    hooks:\n      pre_tool_use:\n        - matcher: run_shell\n          command: {}\n          timeout: {timeout}\njobs:\n  - name: j\n    plan:\n      - agent: sh\n        name: act\n        prompt: Do it.\n        timeout: 600s\n",
        serde_json::to_string(command).unwrap()
    )
}

/// Starts a child in a session of its own, holding the hook's stdout, and waits until it
/// has left the hook's session; writes its pid to `hook-child` in the step directory and
/// says it on stderr (`child PID`).
const ESCAPED_CHILD: &str = r#"setsid sleep 300 & p=$!
until [ "$(cut -d' ' -f6 /proc/$p/stat)" = "$p" ]; do :; done
echo "child $p" >&2
echo $p > "$TREADLE_STEP_DIR/hook-child.tmp"; mv "$TREADLE_STEP_DIR/hook-child.tmp" "$TREADLE_STEP_DIR/hook-child""#;

fn script() -> Script {
    Script::new([
        Reply::tool_call("run_shell", json!({ "command": "printf 'RAN-%s' OK" })),
        Reply::text("Done."),
    ])
}

/// Whether `pid` still runs (a zombie has ended).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The file named `name` anywhere under `root`.
fn find(root: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Some(found) = find(&path, name)
        {
            return Some(found);
        }
    }
    None
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

#[tokio::test(flavor = "multi_thread")]
async fn a_deny_with_children_holding_the_output_denies_and_the_children_die_with_the_hook() {
    let hook = format!(
        "echo '{{\"decision\":\"deny\",\"reason\":\"no, and my children\"}}'\nsleep 300 &\n{ESCAPED_CHILD}"
    );
    let server = ScriptedServer::start(script()).await.expect("server");
    let started = Instant::now();
    let (f, run) = Fixture::new(&guarded(&hook, "30s"))
        .run_at(server.base_url())
        .await;
    run.expect_code(0);
    let results = tool_results(&server);
    assert!(results.contains("denied: no, and my children"), "{results}");
    assert!(
        !results.contains("RAN-OK"),
        "the denied call ran: {results}"
    );
    // Read at the hook's end, not at its timeout.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    // The step directory is gone with the run; its transcript keeps the hook's stderr.
    let out = run.stdout();
    let pid = out
        .lines()
        .find_map(|l| l.split_once("hook stderr: child ").map(|(_, p)| p.trim()))
        .unwrap_or_else(|| panic!("the hook said no child: {out}"))
        .to_owned();
    drop(f);
    assert!(!running(&pid), "the hook's setsid child {pid} outlived it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hooks_setsid_child_dies_when_treadle_is_killed() {
    let server = ScriptedServer::start(script()).await.expect("server");
    let hook = format!("{ESCAPED_CHILD}\nsleep 300");
    let f = Fixture::new(&guarded(&hook, "600s"));
    let mut treadle = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("TREADLE_LOCAL_URL", server.base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let root = f.path().to_path_buf();
    let pid = tokio::task::spawn_blocking(move || {
        let mut file = None;
        wait_for(
            "the hook started its child",
            Duration::from_secs(60),
            || {
                file = find(&root, "hook-child");
                file.is_some()
            },
        );
        std::fs::read_to_string(file.unwrap())
            .unwrap()
            .trim()
            .to_owned()
    })
    .await
    .unwrap();
    assert!(running(&pid));
    let killed = Command::new("kill")
        .args(["-KILL", &treadle.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = treadle.wait();
    tokio::task::spawn_blocking(move || {
        wait_for(
            &format!("the hook's setsid child {pid} died with treadle"),
            Duration::from_secs(10),
            || !running(&pid),
        );
    })
    .await
    .unwrap();
}

/// The file `name` under `root`, once it is there (waited for on a blocking thread).
async fn appeared(root: &Path, name: &'static str) -> String {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut file = None;
        wait_for(&format!("{name} appeared"), Duration::from_secs(60), || {
            file = find(&root, name);
            file.is_some()
        });
        std::fs::read_to_string(file.unwrap())
            .unwrap()
            .trim()
            .to_owned()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_stops_a_hooks_child_that_escaped_a_killed_keeper() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("run_shell", json!({ "command": "printf 'RAN-%s' OK" })),
        Reply::text("Done."),
        Reply::text("Done."),
        Reply::text("Done."),
    ]))
    .await
    .expect("server");
    // The first time, the guard leaves a `setsid` child, says its keeper, and waits; once
    // the test has made the project's `resumed`, it allows at once.
    let hook = format!(
        "[ -e \"$TREADLE_PROJECT_DIR/resumed\" ] && exit 0\n{ESCAPED_CHILD}\necho $PPID > \"$TREADLE_STEP_DIR/hook-keeper\"\nsleep 300"
    );
    let f = Fixture::new(&guarded(&hook, "600s"));
    let mut treadle = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("TREADLE_LOCAL_URL", server.base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = appeared(f.path(), "hook-child").await;
    let keeper = appeared(f.path(), "hook-keeper").await;
    assert!(running(&child) && running(&keeper));
    // Treadle and the hook's keeper die at once: nothing sweeps the child, which lives on.
    for pid in [keeper.clone(), treadle.id().to_string()] {
        let killed = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(killed.success(), "kill -KILL {pid}");
    }
    let _ = treadle.wait();
    assert!(
        running(&child),
        "the child should have escaped a killed keeper"
    );
    std::fs::write(f.path().join("resumed"), "").unwrap();
    let url = server.base_url().to_owned();
    let (f, resumed) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run", "--resume", "1"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .unwrap();
    let err = resumed.stderr();
    // The child, and the `sleep` the killed hook was running.
    assert!(
        err.contains("stopped 2 process(es) left running by run 1"),
        "{}\n{err}",
        resumed.stdout()
    );
    assert!(
        !running(&child),
        "the hook's child {child} outlived the resume"
    );
    resumed.expect_code(0);
    drop(f);
}
