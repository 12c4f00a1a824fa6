//! Each control-flow, var and container key with a wrong type or an impossible value is
//! refused with exit code 2, `treadle.yml:LINE:COL`, the key, and a hint saying what is
//! expected.

use crate::common;

use common::Fixture;

/// Runs `treadle validate` on the YAML: exit 2, the location, a message fragment, a hint.
fn refused(yaml: &str, at: &str, what: &str) {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(&format!("treadle.yml:{at}: ")),
        "expected location {at} in:\n{err}"
    );
    assert!(err.contains(what), "expected `{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "expected a hint in:\n{err}");
}

const HEAD: &str = "jobs:\n- name: j\n  plan:\n";

#[test]
fn when_of_the_wrong_type() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    when: [1, 2]\n"),
        "6:5",
        "a shell command string, or a mapping with `run`",
    );
}

#[test]
fn to_with_an_unknown_outcome() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    to: {{ failed: a }}\n"),
        "6:11",
        "unknown key `failed`",
    );
}

#[test]
fn to_on_a_nested_step() {
    refused(
        &format!(
            "{HEAD}  - do:\n    - task: a\n      run: 'true'\n      to: {{ failure: next }}\n"
        ),
        "7:11",
        "`to` only works on a step of the job's plan",
    );
}

#[test]
fn to_naming_no_step() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    to: {{ failure: nowhere }}\n"),
        "6:20",
        "routes to `nowhere`, which is not a step",
    );
}

#[test]
fn a_backward_route_without_a_bound() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    to: {{ failure: a }}\n"),
        "6:20",
        "without a bound",
    );
}

#[test]
fn max_visits_zero() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    max_visits: 0\n"),
        "6:17",
        "`max_visits` must be at least 1",
    );
}

#[test]
fn a_bare_failure_verdict() {
    refused(
        "agents:\n- name: judge\njobs:\n- name: j\n  plan:\n  - agent: judge\n    prompt: pick\n    verdicts: [approve, failure]\n",
        "8:25",
        "the `failure` verdict must name a target",
    );
}

#[test]
fn race_with_one_branch() {
    refused(
        &format!("{HEAD}  - race:\n    - task: a\n      run: 'true'\n"),
        "4:5",
        "`race` needs at least two steps",
    );
}

#[test]
fn race_branches_with_other_outputs() {
    refused(
        &format!(
            "{HEAD}  - race:\n    - task: a\n      outputs: [x]\n      run: 'true'\n    - task: b\n      run: 'true'\n"
        ),
        "8:7",
        "declares other outputs",
    );
}

#[test]
fn across_axis_without_values() {
    refused(
        &format!("{HEAD}  - task: a\n    across:\n    - var: v\n    run: 'true'\n"),
        "6:12",
        "axis `v` has no values",
    );
}

#[test]
fn across_variable_that_no_axis_names() {
    refused(
        &format!(
            "{HEAD}  - task: a\n    across:\n    - var: v\n      values: [1]\n    run: echo {{{{ .vars.w }}}}\n"
        ),
        "6:7",
        "`{{ .vars.w }}` names no variable of `across`",
    );
}

#[test]
fn across_values_of_the_wrong_type() {
    refused(
        &format!(
            "{HEAD}  - task: a\n    across:\n    - var: v\n      values: [[1]]\n    run: 'true'\n"
        ),
        "7:16",
        "a string, number or boolean",
    );
}

#[test]
fn across_from_file_outside_the_inputs() {
    refused(
        &format!(
            "{HEAD}  - task: a\n    across:\n    - var: v\n      from_file: ../items.json\n    run: 'true'\n"
        ),
        "7:18",
        "leaves the step's directory",
    );
}

#[test]
fn max_in_flight_without_across() {
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    max_in_flight: 2\n"),
        "6:20",
        "`max_in_flight` only works with `across:`",
    );
}

#[test]
fn fail_fast_without_across() {
    // `fail_fast: true` has no position of its own: the step's is given.
    refused(
        &format!("{HEAD}  - task: a\n    run: 'true'\n    fail_fast: true\n"),
        "4:5",
        "`fail_fast` only works with `across:`",
    );
}

#[test]
fn job_timeout_that_is_not_a_duration() {
    refused(
        "jobs:\n- name: j\n  timeout: soon\n  plan:\n  - task: a\n    run: 'true'\n",
        "3:12",
        "`soon` is not a duration",
    );
}

#[test]
fn an_unsupplied_var() {
    refused(
        &format!("{HEAD}  - task: a\n    run: echo ((missing))\n"),
        "5:15",
        "var `((missing))` is not supplied",
    );
}

#[test]
fn load_var_without_a_file() {
    refused(
        &format!("{HEAD}  - load_var: tag\n"),
        "4:15",
        "has no `file:`",
    );
}
