//! One treadle process uses a state file at a time: of two first runs started together in
//! a fresh directory one runs, and the other is told which process holds the state file.

use crate::common;

use std::process::{Command, Stdio};

use common::Fixture;

#[test]
fn two_first_runs_never_both_fail() {
    // The race is in creating the state file: repeat it on fresh directories.
    for round in 0..15 {
        let f = Fixture::new("plan:\n  - task: a\n    run: sleep 0.2\n");
        let start = || {
            Command::new(env!("CARGO_BIN_EXE_treadle"))
                .arg("run")
                .current_dir(f.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(), start());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let codes = [a.status.code(), b.status.code()];
        assert!(
            codes.contains(&Some(0)),
            "round {round}: both failed {codes:?}\n{}\n{}",
            String::from_utf8_lossy(&a.stderr),
            String::from_utf8_lossy(&b.stderr)
        );
        for out in [&a, &b] {
            if out.status.code() != Some(0) {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{err}");
                assert!(
                    err.contains("in use by another treadle process (pid "),
                    "the loser names the holder: {err}"
                );
            }
        }
    }
}

/// Unmounts a bind mount when dropped, so a failed assertion leaves no mount behind.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn runs_are_listed_from_a_read_only_state_directory() {
    let f = Fixture::new("plan:\n  - task: a\n    run: echo hi\n");
    f.treadle(&["run"]).expect_code(0);
    let dir = f.path().join(".treadle");
    // A read-only bind mount: permissions alone stop no root process from writing.
    let bind = Command::new("mount")
        .arg("--bind")
        .arg(&dir)
        .arg(&dir)
        .stderr(Stdio::null())
        .status();
    if !bind.is_ok_and(|s| s.success()) {
        eprintln!("SKIP runs_are_listed_from_a_read_only_state_directory: cannot bind-mount");
        return;
    }
    let mounted = Mounted(dir.clone());
    let ro = Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(ro.success(), "remount read-only");
    assert!(
        std::fs::write(dir.join("probe"), "x").is_err(),
        "the mount is writable"
    );
    let runs = f.treadle(&["runs"]);
    let out = runs.stdout();
    runs.expect_code(0);
    assert!(out.contains("succeeded") && out.contains("main"), "{out}");
    let steps = f.treadle(&["runs", "--steps", "1"]);
    steps.expect_code(0);
    assert!(steps.stdout().contains("a"), "{}", steps.stdout());
    drop(mounted);
}
