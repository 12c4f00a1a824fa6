//! Job-level keys: `serial`, `serial_groups` and `max_in_flight` (always true of treadle,
//! which runs one job at a time), `interruptible` and `max_consecutive_failures` (loaded,
//! with a warning that they do nothing here), and the file's own `assert: execution`
//! naming the jobs `treadle test` ran.

mod common;

use common::Fixture;

const JOBS: &str = r#"
jobs:
- name: first
  serial: true
  serial_groups: [deploy]
  max_in_flight: 1
  plan:
  - task: a
    run: "true"
- name: second
  interruptible: true
  max_consecutive_failures: 3
  plan:
  - task: b
    run: "true"
assert:
  execution: [first, second]
"#;

#[test]
fn the_file_assert_checks_the_jobs_that_ran() {
    let f = Fixture::new(JOBS);
    let run = f.treadle(&["test"]);
    let out = run.stdout();
    assert!(out.contains("test (pipeline assert) ... ok"), "{out}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
    run.expect_code(0);

    let wrong = Fixture::new(&JOBS.replace("[first, second]", "[second, first]"));
    let run = wrong.treadle(&["test"]);
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("expected the jobs [second, first] to run, but [first, second] ran"),
        "{}",
        run.stdout()
    );
}

#[test]
fn keys_without_effect_here_load_with_a_warning() {
    let f = Fixture::new(JOBS);
    let run = f.treadle(&["validate"]);
    run.expect_code(0);
    let err = run.stderr();
    assert!(
        err.contains("`max_consecutive_failures` of job `second` has no effect"),
        "{err}"
    );
    assert!(
        err.contains("`interruptible` of job `second` has no effect"),
        "{err}"
    );
}

#[test]
fn zero_limits_on_a_job_are_refused() {
    let f = Fixture::new(
        "jobs:\n- name: j\n  max_in_flight: 0\n  plan:\n  - task: a\n    run: 'true'\n",
    );
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    assert!(
        run.stderr()
            .contains("treadle.yml:3:18: `max_in_flight` must be at least 1"),
        "{}",
        run.stderr()
    );
}
