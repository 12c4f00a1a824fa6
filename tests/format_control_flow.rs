//! Control flow of the pipeline format, each feature as a pipeline of our own whose job
//! asserts say what must happen, run through `treadle test`: `when:` guards, the five
//! hooks and their classes, `try:`, `to:` and `verdicts:` routes with `max_visits`,
//! `race:`, job `timeout:`, and what `assert: execution` lists.

use crate::common;

use common::Fixture;

/// Runs `treadle test` on `yaml` and expects every one of its `jobs` jobs to pass.
fn passes(yaml: &str, jobs: usize) {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["test"]);
    let out = run.stdout();
    assert!(
        out.contains(&format!("{jobs} passed, 0 failed")),
        "{out}\n{}",
        run.stderr()
    );
    run.expect_code(0);
}

/// Runs `treadle test` on `yaml` and expects its one job to fail with `why` in the output.
fn fails(yaml: &str, why: &str) {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["test"]);
    let out = run.stdout();
    assert!(
        out.contains("0 passed, 1 failed"),
        "{out}\n{}",
        run.stderr()
    );
    assert!(out.contains(why), "expected `{why}` in:\n{out}");
}

#[test]
fn when_guards_skip_only_their_step() {
    passes(
        r#"
jobs:
- name: guarded
  description: a guard that says no skips its step and nothing else
  plan:
  - task: seed
    outputs: [flag]
    run: echo off > flag/state
  - task: skipped
    inputs: [flag]
    when: grep -q on flag/state
    outputs: [extra]
    run: echo never > extra/x
  - task: kept
    inputs: [flag]
    when: { run: grep -q off flag/state }
    run: echo guard said yes
    assert: { stdout: guard said yes }
  - task: reads-absent
    inputs: [extra]
    when: test -s extra/x
    run: exit 9
  assert:
    execution: [seed, kept]
    outcome: succeeded
"#,
        1,
    );
}

#[test]
fn exactly_one_hook_fires_by_class_then_ensure() {
    passes(
        r#"
jobs:
- name: failed-class
  plan:
  - task: says-no
    run: exit 3
    on_success: { task: s1, run: "true" }
    on_failure: { task: f1, run: "true" }
    on_error: { task: e1, run: "true" }
    on_abort: { task: a1, run: "true" }
    ensure: { task: n1, run: "true" }
  on_failure: { task: job-failed, run: "true" }
  on_error: { task: job-errored, run: "true" }
  ensure: { task: job-ensure, run: "true" }
  assert:
    execution: [says-no, f1, n1, job-failed, job-ensure]
    outcome: failed
- name: errored-class
  plan:
  - task: cannot-start
    run: { path: ./no-such-program }
    on_failure: { task: f2, run: "true" }
    on_error: { task: e2, run: "true" }
  assert:
    execution: [cannot-start, e2]
    outcome: failed
- name: timeout-is-a-failure
  plan:
  - task: slow
    run: sleep 5
    timeout: 200ms
    attempts: 3
    on_failure: { task: f3, run: "true" }
    on_error: { task: e3, run: "true" }
  assert:
    execution: [slow, f3]
    outcome: failed
- name: success-class
  plan:
  - task: fine
    run: "true"
    on_success: { task: s4, run: "true" }
    on_failure: { task: f4, run: "true" }
  on_success: { task: job-ok, run: "true" }
  assert:
    execution: [fine, s4, job-ok]
    outcome: succeeded
"#,
        4,
    );
}

#[test]
fn a_failing_ensure_fails_a_green_step() {
    fails(
        r#"
jobs:
- name: j
  plan:
  - task: fine
    run: "true"
    ensure: { task: broken-cleanup, run: exit 1 }
  assert:
    outcome: succeeded
"#,
        "expected succeeded",
    );
}

#[test]
fn try_masks_failures_and_timeouts_and_lists_the_inner_step() {
    passes(
        r#"
jobs:
- name: shrug
  plan:
  - try:
      task: flaky
      run: exit 1
  - try:
      task: slow
      run: sleep 5
      timeout: 200ms
  - try:
      do:
      - task: inner-a
        run: "true"
      - task: inner-b
        run: exit 2
  - task: after
    run: echo carried on
    assert: { stdout: carried on }
  assert:
    execution: [flaky, slow, inner-a, inner-b, after]
    outcome: succeeded
"#,
        1,
    );
}

#[test]
fn execution_lists_leaves_of_blocks_in_declaration_order() {
    passes(
        r#"
jobs:
- name: blocks
  plan:
  - in_parallel:
    - task: slow-first
      run: sleep 0.3
    - task: fast-second
      run: "true"
  - do:
    - task: one
      run: "true"
    - task: two
      run: "true"
    on_success: { task: block-hook, run: "true" }
  assert:
    execution: [slow-first, fast-second, one, two, block-hook]
    outcome: succeeded
"#,
        1,
    );
}

#[test]
fn a_matching_execution_clears_the_failure_but_outcome_succeeded_does_not() {
    passes(
        r#"
jobs:
- name: cleared
  plan:
  - task: boom
    run: exit 1
  assert:
    execution: [boom]
"#,
        1,
    );
    fails(
        r#"
jobs:
- name: not-cleared
  plan:
  - task: boom
    run: exit 1
  assert:
    execution: [boom]
    outcome: succeeded
"#,
        "expected succeeded",
    );
}

#[test]
fn to_routes_loop_back_bounded_and_a_failure_route_consumes_the_failure() {
    passes(
        r#"
jobs:
- name: laps
  plan:
  - task: seed
    outputs: [n]
    run: touch n/count
  - task: bump
    inputs: [n]
    outputs: [n]
    run: echo x >> n/count
  - task: enough
    inputs: [n]
    run: test "$(wc -l < n/count)" -ge 2
    to: { failure: bump }
    max_visits: 4
  - task: next-step
    run: "true"
    to: { success: last }
  - task: jumped-over
    run: exit 1
  - task: last
    run: "true"
  assert:
    execution: [seed, bump, enough, bump, enough, next-step, last]
    outcome: succeeded
- name: fall-through
  plan:
  - task: no
    run: exit 1
    to: { failure: next }
  - task: yes
    run: "true"
  assert:
    execution: [no, yes]
    outcome: succeeded
"#,
        2,
    );
}

#[test]
fn max_visits_exceeded_fails_the_job_and_reaches_its_hooks() {
    passes(
        r#"
jobs:
- name: spin
  plan:
  - task: again
    run: exit 1
    to: { failure: again }
    max_visits: 2
  on_failure: { task: gave-up, run: "true" }
  assert:
    execution: [again, again, gave-up]
    outcome: failed
"#,
        1,
    );
}

#[test]
fn race_keeps_the_first_success_and_records_no_loser() {
    passes(
        r#"
jobs:
- name: hedge
  plan:
  - race:
      steps:
      - task: slow
        outputs: [answer]
        run: sleep 3 && echo slow > answer/text
      - task: quick
        outputs: [answer]
        run: echo quick > answer/text
  - task: read
    inputs: [answer]
    run: cat answer/text
    assert: { stdout: quick }
  assert:
    execution: [quick, read]
    outcome: succeeded
- name: all-fail
  plan:
  - race:
    - task: a
      run: exit 1
    - task: b
      run: exit 2
  assert:
    execution: [a, b]
    outcome: failed
"#,
        2,
    );
}

#[test]
fn a_job_timeout_stops_the_next_step_and_is_a_failure() {
    passes(
        r#"
jobs:
- name: deadline
  timeout: 300ms
  on_failure: { task: late, run: "true" }
  on_error: { task: wrong-class, run: "true" }
  plan:
  - task: long
    run: sleep 0.6
  - task: never
    run: "true"
  assert:
    execution: [long, late]
    outcome: failed
"#,
        1,
    );
}

#[test]
fn a_wrong_execution_fails_the_test() {
    fails(
        r#"
jobs:
- name: j
  plan:
  - do:
    - task: a
      run: "true"
  assert:
    execution: [do]
"#,
        "assert execution",
    );
}
