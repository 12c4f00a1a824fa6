//! Job-level keys: `serial`, `serial_groups`, `max_in_flight`, `interruptible` and
//! `max_consecutive_failures` (what `treadle watch` reads; `max_in_flight` beside
//! `serial` is refused), and the file's own `assert: execution` naming the jobs
//! `treadle test` ran.

use crate::common;

use common::Fixture;

const JOBS: &str = r#"
jobs:
- name: first
  serial: true
  serial_groups: [deploy]
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
fn the_watch_keys_load_without_warnings() {
    let f = Fixture::new(JOBS);
    let run = f.treadle(&["validate"]);
    run.expect_code(0);
    assert!(!run.stderr().contains("has no effect"), "{}", run.stderr());
}

#[test]
fn max_in_flight_beside_serial_is_refused() {
    let f = Fixture::new(&JOBS.replace(
        "  serial_groups: [deploy]\n",
        "  serial_groups: [deploy]\n  max_in_flight: 2\n",
    ));
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    assert!(
        run.stderr()
            .contains("treadle.yml:6:18: job `first` has `max_in_flight` beside `serial`"),
        "{}",
        run.stderr()
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
