//! What the command line writes: no output path panics when stdout is closed early
//! (`treadle schema | head`), and escape sequences in task output do not reach the
//! terminal raw.

use crate::common;

use std::process::{Command, Stdio};

use common::Fixture;

/// Runs `treadle ARGS` in `f` with stdout a pipe whose reading end is already closed.
fn with_closed_stdout(f: &Fixture, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(args)
        .current_dir(f.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_command_panics_on_a_closed_stdout() {
    let f = Fixture::new("plan:\n  - task: a\n    run: echo hi\n");
    f.treadle(&["run"]).expect_code(0);
    for args in [
        &["schema"][..],
        &["validate"],
        &["plan"],
        &["runs"],
        &["runs", "--steps", "1"],
        &["runs", "--cost"],
        &["approvals"],
        &["run"],
        &["test"],
    ] {
        let (code, err) = with_closed_stdout(&f, args);
        assert!(
            !err.contains("panicked"),
            "treadle {args:?} panicked:\n{err}"
        );
        assert!(
            matches!(code, Some(0)),
            "treadle {args:?} exit {code:?}:\n{err}"
        );
    }
}

#[test]
fn escape_sequences_in_task_output_are_shown_not_sent() {
    let f = Fixture::new(
        "plan:\n  - task: a\n    run: printf 'one\\033[2Jtwo\\033]0;title\\007three\\r\\n'\n",
    );
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let out = r.stdout();
    assert!(
        !out.chars().any(|c| c.is_control() && c != '\n'),
        "raw control characters reached stdout: {out:?}"
    );
    assert!(
        out.contains("one\\x1b[2Jtwo\\x1b]0;title\\x07three"),
        "{out}"
    );
}

#[test]
fn no_command_panics_on_a_closed_stderr() {
    // `treadle run 2>&1 | head -1`: both streams go to a pipe whose reader is gone.
    let f = Fixture::new("plan:\n  - task: a\n    run: echo hi\n  - task: b\n    run: exit 1\n");
    for (args, code) in [
        (&["validate", "missing.yml"][..], 2),
        (&["run"], 1),
        (&["runs", "--steps", "99"], 2),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
            .args(args)
            .current_dir(f.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "treadle {args:?}");
    }
}
