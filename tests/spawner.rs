//! How `treadle run` starts a task's command: its keeper comes from the spawner (a child
//! of treadle named `treadle-keeper`, no copy of treadle's memory), and the command gets
//! its standard input, output and error only, not a descriptor treadle inherited.

use crate::common;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Fixture;

/// Runs `treadle run` in `f` with descriptors 10 and 251 inherited (not close-on-exec),
/// as a test harness or a shell may leave them.
fn run_with_inherited_fds(f: &Fixture) -> std::process::Output {
    let file = std::fs::File::open(f.file()).unwrap();
    let fd = file.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treadle"));
    cmd.arg("run").current_dir(f.path()).stdin(Stdio::null());
    // SAFETY: dup2 between fork and exec, a system call only; dup2 clears close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            for to in [10, 251] {
                if libc::dup2(fd, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    drop(file);
    out
}

/// The descriptors `ls /proc/self/fd` listed in a step's output (`ls`'s own directory
/// among them, 3).
fn listed(stdout: &str, step: &str) -> Vec<u32> {
    stdout
        .lines()
        .skip_while(|l| !l.contains(&format!("▶ {step}")))
        .skip(1)
        .take_while(|l| !l.contains('✓') && !l.contains('✗'))
        .filter_map(|l| l.trim_start_matches([' ', '│']).trim().parse().ok())
        .collect()
}

#[test]
fn a_task_gets_only_its_standard_descriptors_not_what_treadle_inherited() {
    let f = Fixture::new(
        r#"
plan:
  - task: confined
    run: ls /proc/self/fd
  - task: open
    confined: false
    run: ls /proc/self/fd
"#,
    );
    let out = run_with_inherited_fds(&f);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in ["confined", "open"] {
        let fds = listed(&stdout, step);
        assert!(fds.contains(&0), "{step}: nothing listed in\n{stdout}");
        assert!(
            fds.iter().all(|fd| *fd <= 3),
            "{step}: the command got more than 0-2 (and ls's 3): {fds:?}\n{stdout}"
        );
    }
}

/// A field of `/proc/PID/status` (its first word), `None` when the process is gone.
fn status(pid: &str, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_owned)
}

#[test]
fn a_tasks_keeper_is_a_small_child_of_treadle_not_a_copy_of_it() {
    let f = Fixture::new(
        r#"
plan:
  - task: slow
    pass_env: [DIR]
    confined: false
    run: |
      echo $PPID > "$DIR/keeper.tmp"; mv "$DIR/keeper.tmp" "$DIR/keeper"
      exec sleep 30
"#,
    );
    let mut treadle = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("DIR", f.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let file = f.path().join("keeper");
    let t0 = Instant::now();
    while !file.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the task did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let keeper = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    let me = treadle.id().to_string();
    let spawner = children(&me)
        .into_iter()
        .find(|pid| status(pid, "Name").as_deref() == Some("treadle-spawner"));
    let anon = |pid: &str| status(pid, "RssAnon").and_then(|v| v.parse::<u64>().ok());
    let seen = (
        status(&keeper, "PPid"),
        status(&keeper, "Name"),
        anon(&keeper),
        spawner.as_deref().and_then(anon),
        anon(&me),
    );
    let _ = treadle.kill();
    let _ = treadle.wait();
    let (parent, name, keeper_anon, spawner_anon, treadle_anon) = seen;
    assert_eq!(parent.as_deref(), Some(me.as_str()), "the keeper's parent");
    assert_eq!(name.as_deref(), Some("treadle-keeper"), "the keeper's name");
    // A fork of treadle shares (and counts) every anonymous page treadle has; a clone of
    // the spawner, forked before treadle built anything, about the spawner's.
    let (keeper_anon, spawner_anon, treadle_anon) = (
        keeper_anon.unwrap_or(u64::MAX),
        spawner_anon.expect("treadle's spawner"),
        treadle_anon.unwrap_or(0),
    );
    assert!(
        keeper_anon <= spawner_anon + 1024 && keeper_anon < treadle_anon,
        "anonymous memory: the keeper {keeper_anon} KiB, the spawner {spawner_anon} KiB, \
         treadle {treadle_anon} KiB"
    );
}

/// The children of process `pid` (of each of its threads).
fn children(pid: &str) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}
