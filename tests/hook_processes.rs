//! Hooks' processes, real ones under `treadle run`: a guard that prints its deny and
//! leaves children holding its output (one in a session of its own) denies, and its
//! children die with it; a hook's `setsid` child dies when treadle is killed with SIGKILL
//! (hooks run under the keeper, as tasks do).

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
