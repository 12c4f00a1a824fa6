//! Processes die with their run: a task's command and a grandchild that left its group
//! (`setsid`) are gone soon after `treadle run` is killed with SIGKILL, and `--resume`
//! kills what a run killed with its keepers left before it runs the step again.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Fixture;

/// The task: a `setsid sleep` grandchild in a session of its own, then the shell becomes
/// `sleep` itself. Its second run (after a resume) says whether the first one's grandchild
/// is still alive. Not confined: its bookkeeping files are outside the step directory.
const PIPELINE: &str = r#"
plan:
  - task: slow
    pass_env: [DIR]
    confined: false
    run: |
      alive() { [ -r /proc/$1/stat ] && ! grep -q ') Z' /proc/$1/stat; }
      if [ -f "$DIR/grandchild" ]; then
        if alive "$(cat "$DIR/grandchild")"; then echo "old copy alive"; exit 1; fi
        echo "no old copy"; exit 0
      fi
      setsid sleep 300 &
      echo $! > "$DIR/grandchild.tmp"; mv "$DIR/grandchild.tmp" "$DIR/grandchild"
      echo $PPID > "$DIR/keeper"
      echo $$ > "$DIR/command.tmp"; mv "$DIR/command.tmp" "$DIR/command"
      exec sleep 300
"#;

/// Whether `pid` still runs (a zombie has ended; init may not have reaped it yet).
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

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Starts `treadle run` and waits for the task's pids: (treadle, command, grandchild,
/// keeper).
fn started(f: &Fixture) -> (std::process::Child, String, String, String) {
    let dir = f.path().to_str().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let command = f.path().join("command");
    wait_for("the task started", Duration::from_secs(30), || {
        !read(&command).is_empty()
    });
    let (cmd, grand, keeper) = (
        read(&command),
        read(&f.path().join("grandchild")),
        read(&f.path().join("keeper")),
    );
    assert!(running(&cmd) && running(&grand) && running(&keeper));
    (child, cmd, grand, keeper)
}

fn sigkill(pid: &str) {
    let status = Command::new("kill").args(["-KILL", pid]).status().unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

#[test]
fn sigkill_of_treadle_kills_the_task_and_its_setsid_grandchild() {
    let f = Fixture::new(PIPELINE);
    let (mut treadle, cmd, grand, keeper) = started(&f);
    sigkill(&treadle.id().to_string());
    let _ = treadle.wait();
    for (what, pid) in [
        ("command", &cmd),
        ("setsid grandchild", &grand),
        ("keeper", &keeper),
    ] {
        wait_for(
            &format!("the {what} ({pid}) died"),
            Duration::from_secs(10),
            || !running(pid),
        );
    }
}

#[test]
fn resume_after_a_kill_finds_no_old_copy_alive() {
    let f = Fixture::new(PIPELINE);
    let (mut treadle, cmd, grand, keeper) = started(&f);
    // Treadle and the keeper die at once: nothing is left to sweep, and the grandchild,
    // orphaned, lives on. Only the resume can stop it.
    sigkill(&keeper);
    sigkill(&treadle.id().to_string());
    let _ = treadle.wait();
    wait_for(
        "the command died with its keeper",
        Duration::from_secs(10),
        || !running(&cmd),
    );
    assert!(
        running(&grand),
        "the grandchild should have escaped a killed keeper"
    );
    let dir = f.path().to_str().unwrap();
    let resumed = f.treadle_env(&["run", "--resume", "1"], &[("DIR", dir)]);
    let (out, err) = (resumed.stdout(), resumed.stderr());
    resumed.expect_code(0);
    assert!(out.contains("no old copy"), "{out}\n{err}");
    assert!(
        err.contains("stopped 1 process(es) left running by run 1"),
        "{err}"
    );
    assert!(!running(&grand));
}
