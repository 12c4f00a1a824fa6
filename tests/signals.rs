//! SIGTERM and SIGHUP stop a run like Ctrl-C (SIGINT): the commands its tasks started are
//! killed (their whole process group), the run is recorded as aborted, not left
//! `running`, it can be resumed, and treadle exits 128 + the signal number.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Fixture;

const SLOW: &str = r#"
plan:
  - task: one
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: echo one >> "$COUNT"
  - task: slow
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [MARK, PIDFILE]
    confined: false
    run: test -f "$MARK" || { touch "$MARK"; sleep 300 & echo $! > "$PIDFILE"; wait; }
  - task: after
    run: echo after
"#;

fn alive(pid: &str) -> bool {
    // `kill -0` fails once the process is gone (reaped by init after its group was killed).
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stopped_by(signal: &str, code: i32) {
    let f = Fixture::new(SLOW);
    let (count, mark, pidfile) = (
        f.path().join("count"),
        f.path().join("mark"),
        f.path().join("pid"),
    );
    let env = [
        ("COUNT", count.to_str().unwrap()),
        ("MARK", mark.to_str().unwrap()),
        ("PIDFILE", pidfile.to_str().unwrap()),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_for("the slow task started", || {
        !read(&pidfile).trim().is_empty()
    });
    let sleeper = read(&pidfile).trim().to_owned();
    assert!(alive(&sleeper));
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let t0 = Instant::now();
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("treadle did not stop on SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(code), "exit status {exit:?}");
    wait_for("the task's command was killed", || !alive(&sleeper));
    let runs = f.treadle(&["runs"]);
    let out = runs.stdout();
    assert!(out.contains("aborted") && !out.contains("running"), "{out}");
    let resumed = f.treadle_env(&["run", "--resume", "1"], &env);
    resumed.expect_code(0);
    assert_eq!(read(&count).lines().count(), 1, "step one ran twice");
}

#[test]
fn sigterm_kills_the_tasks_commands_and_records_the_run_aborted() {
    stopped_by("TERM", 143);
}

#[test]
fn sighup_kills_the_tasks_commands_and_records_the_run_aborted() {
    stopped_by("HUP", 129);
}

#[test]
fn sigint_still_exits_130() {
    stopped_by("INT", 130);
}

#[test]
fn sigterm_while_an_approval_waits_aborts_it_and_the_run() {
    let f = Fixture::new(
        "plan:\n  - task: one\n    run: echo one\n  - approval: gate\n    timeout: 60s\n  - task: after\n    run: echo after\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the approval is parked", || {
        f.treadle(&["approvals"]).stdout().contains("gate")
    });
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(143));
    let waiting = f.treadle(&["approvals"]).stdout();
    assert!(waiting.contains("no approvals waiting"), "{waiting}");
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("gate") && !l.contains("running") && !l.contains("succeeded")),
        "{steps}"
    );
    assert!(f.treadle(&["runs"]).stdout().contains("aborted"));
}
