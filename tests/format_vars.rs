//! Pipeline vars: `((name))` filled from `--var` and `--vars-file` before the file is
//! parsed, and from a `load_var:` step at run time; `across:` cells from a file a step
//! wrote, with their outputs collected.

use crate::common;

use common::Fixture;

#[test]
fn var_flags_fill_the_file_and_the_flag_wins_over_the_file() {
    let f = Fixture::new(
        "jobs:\n- name: j\n  plan:\n  - task: show\n    run: echo \"deploying ((app)) to ((env))\"\n    assert: { stdout: deploying shop to prod }\n",
    );
    std::fs::write(f.path().join("vars.yml"), "app: shop\nenv: staging\n").unwrap();
    f.treadle(&["test", "--vars-file", "vars.yml", "--var", "env=prod"])
        .expect_code(0);
    // Without the file, `((app))` is unsupplied: a load error naming it.
    let run = f.treadle(&["test", "--var", "env=prod"]);
    run.expect_code(2);
    assert!(run.stderr().contains("((app))"), "{}", run.stderr());
}

#[test]
fn a_bad_var_flag_is_refused() {
    let f = Fixture::new("jobs:\n- name: j\n  plan:\n  - task: a\n    run: 'true'\n");
    let run = f.treadle(&["run", "--var", "novalue"]);
    run.expect_code(2);
    assert!(run.stderr().contains("NAME=VALUE"), "{}", run.stderr());
}

#[test]
fn load_var_captures_a_trimmed_value_for_later_steps() {
    let f = Fixture::new(
        r#"
jobs:
- name: release
  plan:
  - task: pick
    outputs: [meta]
    run: printf 'v2.0.1\n\n' > meta/version
  - load_var: version
    inputs: [meta]
    file: meta/version
  - task: announce
    run: echo "shipping ((version)) now"
    assert: { stdout: shipping v2.0.1 now }
  assert:
    execution: [pick, version, announce]
    outcome: success
"#,
    );
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}",
        run.stdout()
    );
}

#[test]
fn across_from_a_file_collects_each_cells_outputs() {
    let f = Fixture::new(
        r#"
jobs:
- name: fan-out
  plan:
  - task: plan
    outputs: [work]
    run: printf '["a","b","c"]' > work/items.json
  - across:
    - var: item
      from_file: work/items.json
    - var: n
      values: [1, 2]
    task: "do {{ .vars.item }}-{{ .vars.n }}"
    inputs: [work]
    outputs: [done]
    max_in_flight: 3
    run: echo "{{ .vars.item }}{{ .vars.n }}" > done/out
  - task: gather
    inputs: [done]
    run: cat done/*/*/out | sort | tr '\n' ' '
    assert: { stdout: a1 a2 b1 b2 c1 c2 }
  assert:
    execution: [plan, do a-1, do a-2, do b-1, do b-2, do c-1, do c-2, gather]
    outcome: success
- name: partial
  plan:
  - across:
    - var: v
      values: [ok, bad, ok2]
    task: cell
    outputs: [res]
    run: test {{ .vars.v }} != bad && echo fine > res/x
  - task: after
    inputs: [res]
    run: ls res | tr '\n' ' '
  assert:
    execution: ["cell [v=ok]", "cell [v=bad]", "cell [v=ok2]"]
    outcome: failure
- name: fail-fast
  plan:
  - across:
    - var: v
      values: [bad, never]
    fail_fast: true
    task: cell
    run: test {{ .vars.v }} != bad
  assert:
    execution: ["cell [v=bad]"]
    outcome: failure
"#,
    );
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("3 passed, 0 failed"),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
}

#[test]
fn an_empty_file_axis_runs_nothing_and_the_plan_goes_on() {
    let f = Fixture::new(
        r#"
jobs:
- name: empty
  plan:
  - task: scan
    outputs: [found]
    run: echo '[]' > found/items.json
  - across:
    - var: item
      from_file: found/items.json
    task: look
    inputs: [found]
    run: exit 1
  - task: after
    run: "true"
  assert:
    execution: [scan, after]
    outcome: success
"#,
    );
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}",
        run.stdout()
    );
}
