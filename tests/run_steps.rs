//! Running task pipelines: exit codes, state, containers, hooks, attempts, timeouts,
//! artifacts and the JSON transcript.

use crate::common;

use std::time::Duration;

use common::Fixture;

#[test]
fn failing_task_exits_1_and_is_recorded_failed() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - task: ok\n        run: 'true'\n      - task: boom\n        run: echo oops; exit 3\n      - task: never\n        run: 'true'\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    assert!(run.stdout().contains("boom failed"), "{}", run.stdout());
    assert!(run.stdout().contains("exit 3"), "{}", run.stdout());
    let steps = f.treadle(&["runs", "--steps", "1"]);
    steps.expect_code(0);
    let out = steps.stdout();
    let line = |name: &str| {
        out.lines()
            .find(|l| l.contains(name))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("ok").contains("succeeded"), "{out}");
    assert!(
        line("boom").contains("failed") && line("boom").contains(" 3 "),
        "{out}"
    );
    assert!(line("never").contains("skipped"), "{out}");
    let runs = f.treadle(&["runs"]).stdout();
    assert!(runs.contains("failed"), "{runs}");
    assert!(f.path().join(".treadle/state.redb").is_file());
}

/// Each branch marks that it started and then waits (up to 60 s) until every branch has: run
/// one after another, the first branch would give up and fail. No wall-clock bound: the proof is
/// that all three were running at the same moment.
#[test]
fn in_parallel_runs_together_and_fail_fast_interrupts() {
    let marks = tempfile::tempdir().unwrap();
    let dir = marks.path().display();
    let branch = |name: &str| {
        format!(
            "          - task: {name}\n            confined: false\n            run: touch {dir}/{name}; for i in $(seq 600); do [ -e {dir}/a ] && [ -e {dir}/b ] && [ -e {dir}/c ] && exit 0; sleep 0.1; done; exit 1\n"
        )
    };
    let f = Fixture::new(&format!(
        "jobs:\n  - name: j\n    plan:\n      - in_parallel:\n{}{}{}",
        branch("a"),
        branch("b"),
        branch("c")
    ));
    f.treadle(&["run"]).expect_code(0);

    // fail_fast: the failing branch interrupts the slow one, which never reaches its mark.
    let slow_done = marks.path().join("slow-done");
    let f = Fixture::new(&format!(
        "jobs:\n  - name: j\n    plan:\n      - in_parallel:\n          fail_fast: true\n          steps:\n            - task: slow\n              confined: false\n              run: sleep 20; touch {}\n            - task: bad\n              run: exit 1\n",
        slow_done.display()
    ));
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    // Not interrupted, the run would have waited for the slow branch and recorded it succeeded.
    let steps = f.treadle(&["runs", "--steps", "1"]).stdout();
    let slow = steps
        .lines()
        .find(|l| l.contains("slow"))
        .unwrap_or_default();
    assert!(!slow.contains("succeeded"), "{steps}");
    assert!(
        !slow_done.exists(),
        "fail_fast did not interrupt the slow branch"
    );

    // limit: 1 runs them one after the other: each branch logs its start and end, and no start
    // comes between another branch's start and end.
    let log = marks.path().join("order.log");
    let f = Fixture::new(&format!(
        "jobs:\n  - name: j\n    plan:\n      - in_parallel:\n          limit: 1\n          steps:\n            - task: a\n              confined: false\n              run: echo start >> {log}; sleep 0.3; echo end >> {log}\n            - task: b\n              confined: false\n              run: echo start >> {log}; sleep 0.3; echo end >> {log}\n",
        log = log.display()
    ));
    f.treadle(&["run"]).expect_code(0);
    let order = std::fs::read_to_string(&log).unwrap();
    assert_eq!(order, "start\nend\nstart\nend\n", "limit ignored");
}

#[test]
fn in_parallel_without_fail_fast_runs_all_and_fails() {
    let marker = tempfile::tempdir().unwrap();
    let m = marker.path().join("done");
    let yaml = format!(
        "jobs:\n  - name: j\n    plan:\n      - in_parallel:\n          - task: bad\n            run: exit 1\n          - task: slow\n            confined: false\n            run: sleep 0.5; touch {}\n",
        m.display()
    );
    Fixture::new(&yaml).treadle(&["run"]).expect_code(1);
    assert!(m.exists(), "the other branch should have finished");
}

#[test]
fn try_swallows_failure() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - try:\n          task: flaky\n          run: exit 1\n      - task: after\n        run: echo after-ran\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(run.stdout().contains("after-ran"));
}

#[test]
fn hooks_run_as_concourse_says() {
    let marks = tempfile::tempdir().unwrap();
    let m = |n: &str| marks.path().join(n).display().to_string();
    let yaml = format!(
        "jobs:\n  - name: j\n    plan:\n      - task: good\n        run: 'true'\n        on_success:\n          task: s\n          confined: false\n          run: touch {}\n        on_failure:\n          task: f1\n          confined: false\n          run: touch {}\n      - task: bad\n        run: exit 1\n        on_failure:\n          task: f2\n          confined: false\n          run: touch {}\n        ensure:\n          task: e\n          confined: false\n          run: touch {}\n",
        m("success"),
        m("failure1"),
        m("failure2"),
        m("ensure")
    );
    Fixture::new(&yaml).treadle(&["run"]).expect_code(1);
    assert!(marks.path().join("success").exists());
    assert!(!marks.path().join("failure1").exists());
    assert!(marks.path().join("failure2").exists());
    assert!(marks.path().join("ensure").exists());

    // A failing ensure fails an otherwise good step.
    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - task: good\n        run: 'true'\n        ensure:\n          task: cleanup\n          run: exit 1\n",
    );
    f.treadle(&["run"]).expect_code(1);
}

#[test]
fn attempts_retry_until_success() {
    let counter = tempfile::tempdir().unwrap();
    let c = counter.path().join("n");
    let yaml = format!(
        "jobs:\n  - name: j\n    plan:\n      - task: flaky\n        attempts: 3\n        confined: false\n        run: echo x >> {c}; test $(wc -l < {c}) -ge 2\n",
        c = c.display()
    );
    let f = Fixture::new(&yaml);
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert_eq!(std::fs::read_to_string(&c).unwrap().lines().count(), 2);
    assert!(run.stdout().contains("attempt 2"), "{}", run.stdout());

    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - task: never\n        attempts: 2\n        run: exit 1\n",
    );
    f.treadle(&["run"]).expect_code(1);
    assert!(
        f.treadle(&["runs", "--steps", "1"])
            .stdout()
            .lines()
            .any(|l| l.contains("never") && l.trim_end().contains("2  exit code 1"))
    );
}

#[test]
fn timeout_kills_the_process_group() {
    let pids = tempfile::tempdir().unwrap();
    let p = pids.path().join("pid");
    let yaml = format!(
        "jobs:\n  - name: j\n    plan:\n      - task: stuck\n        timeout: 1s\n        confined: false\n        run: sleep 30 & echo $! > {}; wait\n",
        p.display()
    );
    let run = Fixture::new(&yaml).treadle(&["run"]);
    run.expect_code(1);
    assert!(
        run.stdout().contains("timed out after 1.00s"),
        "{}",
        run.stdout()
    );
    let pid = std::fs::read_to_string(&p).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let alive = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "the background sleep survived the timeout");
}

#[test]
fn artifacts_are_isolated_and_read_only() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - task: make\n        outputs: [a, b]\n        run: echo one > a/f; echo two > b/f\n      - task: use\n        inputs: [a]\n        run: |\n          test -f a/f\n          test ! -e b\n          test \"$(stat -c %a a/f)\" = 444\n          test \"$(ls)\" = a\n      - task: extend\n        inputs: [a]\n        outputs: [a]\n        run: echo more >> a/f\n      - task: check\n        inputs: [a]\n        run: test $(wc -l < a/f) = 2\n",
    );
    f.treadle(&["run"]).expect_code(0);
}

#[test]
fn exec_form_and_env() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    plan:\n      - task: direct\n        env: { GREETING: hi }\n        run:\n          path: sh\n          args: [-c, 'test \"$GREETING\" = hi && echo got-$GREETING']\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(run.stdout().contains("got-hi"));
}

#[test]
fn json_transcript_is_json_lines() {
    let f =
        Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: greet\n        run: echo hi\n");
    let run = f.treadle(&["run", "--json"]);
    run.expect_code(0);
    let events: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "step_started",
            "output",
            "step_finished",
            "run_finished"
        ]
    );
    assert_eq!(events[2]["line"], "hi");
    assert_eq!(events[3]["status"], "succeeded");
}

#[test]
fn state_flag_and_multiple_jobs() {
    let f = Fixture::new(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n  - name: b\n    plan:\n      - task: y\n        run: 'true'\n",
    );
    let run = f.treadle(&["run"]);
    run.expect_code(2);
    assert!(run.stderr().contains("--job"), "{}", run.stderr());
    let state = f.path().join("elsewhere/s.redb");
    f.treadle(&["run", "--job", "b", "--state", state.to_str().unwrap()])
        .expect_code(0);
    assert!(state.is_file());
    assert!(
        f.treadle(&["runs", "--state", state.to_str().unwrap()])
            .stdout()
            .contains(" b ")
    );
}

#[test]
fn plan_and_schema() {
    let f = Fixture::new(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n        ensure:\n          task: tidy\n          run: 'true'\n",
    );
    let plan = f.treadle(&["plan"]);
    plan.expect_code(0);
    assert!(
        plan.stdout().contains("x [task] would run"),
        "{}",
        plan.stdout()
    );
    let schema = f.treadle(&["schema"]);
    schema.expect_code(0);
    let v: serde_json::Value = serde_json::from_str(&schema.stdout()).unwrap();
    assert!(
        v["$defs"]["Step"]["properties"]["in_parallel"].is_object(),
        "{v}"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_aborts_with_130() {
    let f =
        Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: long\n        run: sleep 30\n");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let runs = f.treadle(&["runs"]).stdout();
    assert!(runs.contains("aborted"), "{runs}");
}
