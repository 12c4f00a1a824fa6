//! Container keys (`image:`, `network:`, `privileged:`, `user:`, `container_limits:`) load
//! and are checked; `validate` warns that treadle has no container runtime, and such a step
//! errors saying so. Also `env:` as a list of names, and the `workspace:` block.

use crate::common;

use common::Fixture;

const CONTAINER: &str = r#"
jobs:
- name: boxed
  plan:
  - task: build
    image: golang:1.25
    network: none
    privileged: true
    user: root
    container_limits: { cpu: 512, memory: 2147483648 }
    run: go version
    on_error: { task: no-runtime, run: "true" }
  assert:
    execution: [build, no-runtime]
    outcome: failure
"#;

#[test]
fn container_keys_load_and_validate_warns() {
    let f = Fixture::new(CONTAINER);
    let run = f.treadle(&["validate"]);
    run.expect_code(0);
    let err = run.stderr();
    assert!(
        err.contains(
            "treadle.yml:6:12: warning: this step needs a container runtime (`image: golang:1.25`)"
        ),
        "{err}"
    );
}

#[test]
fn a_container_step_errors_saying_why_and_fires_on_error() {
    let f = Fixture::new(CONTAINER);
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}",
        run.stdout()
    );
    let plain = f.treadle(&["run"]);
    plain.expect_code(0); // the job's asserts expected exactly this
    assert!(
        plain.stdout().contains("needs a container runtime"),
        "{}",
        plain.stdout()
    );
}

#[test]
fn env_as_a_list_of_names_passes_them_through() {
    let f = Fixture::new(
        "jobs:\n- name: j\n  plan:\n  - task: show\n    env: [TREADLE_TEST_PASSED]\n    run: echo \"got $TREADLE_TEST_PASSED\"\n    assert: { stdout: got through }\n",
    );
    let run = f.treadle_env(&["test"], &[("TREADLE_TEST_PASSED", "through")]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}",
        run.stdout()
    );
}

#[test]
fn a_btrfs_workspace_loads_but_a_run_refuses_it() {
    let f = Fixture::new(
        "workspace:\n  strategy: btrfs\n  root: /mnt/btrfs\njobs:\n- name: j\n  plan:\n  - task: a\n    run: 'true'\n",
    );
    let v = f.treadle(&["validate"]);
    v.expect_code(0);
    assert!(
        v.stderr().contains("warning: `workspace.strategy: btrfs`"),
        "{}",
        v.stderr()
    );
    let run = f.treadle(&["run"]);
    run.expect_code(2);
    assert!(run.stdout().contains("btrfs"), "{}", run.stdout());
}

/// `validate` refuses the YAML with exit 2, at `at`, saying `what`, with a hint.
fn refused(yaml: &str, at: &str, what: &str) {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(&format!("treadle.yml:{at}: ")),
        "expected {at} in:\n{err}"
    );
    assert!(err.contains(what), "expected `{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "{err}");
}

#[test]
fn container_keys_without_an_image_are_load_errors() {
    // `none`, `loopback`, `any` and port lists are treadle's own grants; another name is a
    // container network.
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    network: mynet\n    run: 'true'\n",
        "5:14",
        "`network` needs `image:`",
    );
    // The keys that only mean something beside `image:` are refused where they are written.
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    privileged: true\n    run: 'true'\n",
        "5:17",
        "`privileged` needs `image:`",
    );
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    user: root\n    run: 'true'\n",
        "5:11",
        "`user` needs `image:`",
    );
    // A resource's commands run here: no container key belongs on a get or a put.
    refused(
        "resources:\n- name: r\n  type: time\n  source: { interval: 1h }\njobs:\n- name: j\n  plan:\n  - get: r\n    image: alpine\n",
        "9:12",
        "`image` does not belong on a `get`/`put` step",
    );
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    image: alpine\n    container_limits: {}\n    run: 'true'\n",
        "6:23",
        "`container_limits` sets no limit",
    );
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    image: alpine\n    user: --privileged\n    run: 'true'\n",
        "6:11",
        "is not a user name",
    );
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    image: alpine\n    privileged: maybe\n    run: 'true'\n",
        "6:17",
        "privileged",
    );
    refused(
        "jobs:\n- name: j\n  plan:\n  - task: a\n    image: alpine\n    container_limits: { memory: lots }\n    run: 'true'\n",
        "6:33",
        "memory",
    );
    refused(
        "workspace:\n  strategy: zfs\njobs:\n- name: j\n  plan:\n  - task: a\n    run: 'true'\n",
        "2:13",
        "`workspace.strategy` is `zfs`",
    );
}
