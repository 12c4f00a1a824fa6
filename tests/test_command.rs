//! `treadle test`: every job runs, every assert is checked, and a summary line counts them.

use crate::common;

use common::Fixture;

#[test]
fn test_runs_every_job_and_counts_passes_and_failures() {
    let f = Fixture::new(
        "jobs:\n  - name: good\n    plan:\n      - task: a\n        run: echo hi\n        assert: { stdout: hi }\n  - name: expected-failure\n    assert:\n      execution: [boom]\n      outcome: failure\n    plan:\n      - task: boom\n        run: exit 4\n      - task: never\n        run: 'true'\n  - name: wrong-order\n    assert:\n      execution: [b, a]\n    plan:\n      - task: a\n        run: 'true'\n      - task: b\n        run: 'true'\n",
    );
    let run = f.treadle(&["test"]);
    run.expect_code(1);
    let out = run.stdout();
    assert!(out.contains("test good ... ok"), "{out}");
    assert!(out.contains("test expected-failure ... ok"), "{out}");
    assert!(out.contains("test wrong-order ... FAILED"), "{out}");
    assert!(out.contains("job assert failed"), "{out}");
    assert!(
        out.lines().last().unwrap_or("") == "2 passed, 1 failed",
        "{out}"
    );
    // Each job is a run of its own in the one state file.
    let runs = f.treadle(&["runs"]).stdout();
    assert_eq!(runs.lines().count(), 4, "{runs}");
}

#[test]
fn test_exits_0_when_every_job_passes() {
    let f = Fixture::new(
        "jobs:\n  - name: one\n    plan:\n      - task: a\n        run: 'true'\n  - name: two\n    plan:\n      - task: b\n        outputs: [o]\n        run: echo x > o/f\n        assert: { files: [o/f] }\n",
    );
    let run = f.treadle(&["test"]);
    run.expect_code(0);
    assert!(
        run.stdout().contains("2 passed, 0 failed"),
        "{}",
        run.stdout()
    );
}

#[test]
fn test_of_a_broken_file_exits_2() {
    let f = Fixture::new("jobs:\n  - name: one\n    plan:\n      - task: a\n        rnu: 'true'\n");
    f.treadle(&["test"]).expect_code(2);
}

#[test]
fn failed_asserts_reach_the_json_transcript_typed() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    assert:\n      execution: [b, a]\n    plan:\n      - task: a\n        run: echo hello\n        assert: { stdout: bye, code: 3 }\n",
    );
    let run = f.treadle(&["run", "--json"]);
    run.expect_code(1);
    let lines: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let step = lines
        .iter()
        .find(|e| e["event"] == "step_finished" && e["name"] == "a")
        .expect("the step's step_finished line");
    assert_eq!(step["kind"], "task");
    let checks: Vec<&str> = step["asserts"]
        .as_array()
        .expect("typed asserts")
        .iter()
        .filter_map(|a| a["check"].as_str())
        .collect();
    assert_eq!(checks, ["stdout", "code"]);
    assert_eq!(step["asserts"][0]["expected"], "bye");
    assert_eq!(step["asserts"][1]["expected"], 3);
    assert_eq!(step["asserts"][1]["actual"], 0);
}

#[test]
fn a_failed_job_assert_reaches_the_json_transcript_typed() {
    let f = Fixture::new(
        "jobs:\n  - name: j\n    assert:\n      execution: [b, a]\n    plan:\n      - task: a\n        run: 'true'\n      - task: b\n        run: 'true'\n",
    );
    let run = f.treadle(&["run", "--json"]);
    run.expect_code(1);
    let end: serde_json::Value = run
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "run_finished")
        .expect("run_finished line");
    assert_eq!(end["asserts"][0]["check"], "execution");
    assert_eq!(end["asserts"][0]["actual"], serde_json::json!(["a", "b"]));
}
