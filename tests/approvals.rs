//! Approval steps, answered from a second `treadle` process while the run waits.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Fixture;

const PIPELINE: &str = "jobs:\n  - name: ship\n    plan:\n      - task: build\n        run: echo built\n      - approval: deploy\n        message: Ship it?\n        timeout: 60s\n      - task: deploy-now\n        run: echo deploying\n";

/// Starts `treadle run` in the background (stdin is not a terminal: a headless run).
fn spawn_run(f: &Fixture) -> Child {
    Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn treadle run")
}

/// Waits until `treadle approvals` lists run 1's `deploy` step.
fn wait_until_parked(f: &Fixture) {
    let start = Instant::now();
    loop {
        let list = f.treadle(&["approvals"]);
        list.expect_code(0);
        if list.stdout().contains("deploy") {
            assert!(list.stdout().contains("Ship it?"), "{}", list.stdout());
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never parked: {}",
            list.stdout()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn finish(child: Child) -> common::Run {
    common::Run(child.wait_with_output().expect("wait for treadle run"))
}

#[test]
fn approve_from_another_process_continues_the_run() {
    let f = Fixture::new(PIPELINE);
    let child = spawn_run(&f);
    wait_until_parked(&f);
    let answer = f.treadle(&["approve", "1", "1"]);
    answer.expect_code(0);
    assert!(answer.stdout().contains("approved run 1 step 1 (deploy)"));
    let run = finish(child);
    run.expect_code(0);
    assert!(run.stdout().contains("approved by"), "{}", run.stdout());
    assert!(run.stdout().contains("deploying"), "{}", run.stdout());
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    assert!(
        steps
            .lines()
            .any(|l| l.contains("deploy ") && l.contains("succeeded")),
        "{steps}"
    );
    // Nothing is left waiting, and a second answer finds nothing to answer.
    assert!(f.treadle(&["approvals"]).stdout().contains("no approvals"));
    f.treadle(&["reject", "1", "1"]).expect_code(2);
}

#[test]
fn reject_from_another_process_fails_the_step() {
    let f = Fixture::new(PIPELINE);
    let child = spawn_run(&f);
    wait_until_parked(&f);
    f.treadle(&["reject", "1", "deploy"]).expect_code(0);
    let run = finish(child);
    run.expect_code(1);
    assert!(run.stdout().contains("was rejected by"), "{}", run.stdout());
    assert!(
        run.stdout().contains("deploy-now skipped"),
        "{}",
        run.stdout()
    );
}

#[test]
fn deadline_answers_with_on_timeout() {
    let approve = Fixture::new(
        "plan:\n  - approval: gate\n    timeout: 300ms\n    on_timeout: approve\n  - task: after\n    run: echo went on\n",
    );
    let run = approve.treadle(&["run"]);
    run.expect_code(0);
    assert!(
        run.stdout().contains("approved by timeout"),
        "{}",
        run.stdout()
    );

    let reject = Fixture::new("plan:\n  - approval: gate\n    timeout: 300ms\n");
    let run = reject.treadle(&["run"]);
    run.expect_code(1);
    assert!(
        run.stdout().contains("timed out and was rejected"),
        "{}",
        run.stdout()
    );
}

#[test]
fn headless_approval_without_a_deadline_is_rejected_at_once() {
    let f = Fixture::new("plan:\n  - approval: gate\n  - task: after\n    run: 'true'\n");
    let t = Instant::now();
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(run.stdout().contains("headless"), "{}", run.stdout());
}

#[test]
fn interrupting_a_waiting_run_aborts_it_and_clears_the_approval() {
    let f = Fixture::new(PIPELINE);
    let child = spawn_run(&f);
    wait_until_parked(&f);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let run = finish(child);
    run.expect_code(130);
    assert!(f.treadle(&["approvals"]).stdout().contains("no approvals"));
    f.treadle(&["approve", "1", "1"]).expect_code(2);
}

#[test]
fn bad_on_timeout_is_a_load_error() {
    let f = Fixture::new("plan:\n  - approval: gate\n    timeout: 1m\n    on_timeout: maybe\n");
    let run = f.treadle(&["run"]);
    run.expect_code(2);
    assert!(run.stderr().contains("treadle.yml:4:"), "{}", run.stderr());
    let f = Fixture::new("plan:\n  - approval: gate\n    on_timeout: approve\n");
    f.treadle(&["validate"]).expect_code(2);
}

#[test]
fn a_killed_runs_approval_is_not_listed_once_the_run_is_resumed() {
    let f = Fixture::new(PIPELINE);
    let mut child = spawn_run(&f);
    wait_until_parked(&f);
    // SIGKILL: the run cannot clean up its parked approval.
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(["run", "--resume", "1"])
        .current_dir(f.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let list = loop {
        let list = f.treadle(&["approvals"]).stdout();
        if list
            .lines()
            .any(|l| l.split_whitespace().next() == Some("2"))
        {
            break list;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{list}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some("1")),
        "run 1's stale approval is still listed:\n{list}"
    );
    f.treadle(&["approve", "2", "deploy"]).expect_code(0);
    let run = common::Run(resumed.wait_with_output().unwrap());
    run.expect_code(0);
}
