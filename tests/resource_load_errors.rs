//! Wrong values in the resource keys (`resource_types:`, `version:`, `defaults:`, a
//! resource's `type:`) are refused at load with `FILE:LINE:COL`, a message and a hint.

use crate::common;

use common::Fixture;

/// Runs `treadle validate` on the YAML and checks exit 2, the location and a fragment.
fn refused(yaml: &str, at: &str, what: &str) {
    let f = Fixture::new(yaml);
    let r = f.treadle(&["validate"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains(&format!("treadle.yml:{at}: ")),
        "expected location {at} in:\n{err}"
    );
    assert!(err.contains(what), "expected `{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "expected a hint in:\n{err}");
}

const TYPE: &str = "resource_types:
  - name: counter
    config:
      check: echo []
      in: 'true'
resources:
  - name: ticks
    type: counter
    source: {}
";

fn with_job(get: &str) -> String {
    format!("{TYPE}jobs:\n  - name: build\n    plan:\n{get}")
}

#[test]
fn version_must_be_latest_every_or_a_mapping() {
    refused(
        &with_job("      - get: ticks\n        version: 7\n"),
        "14:9",
        "wrong type",
    );
    refused(
        &with_job("      - get: ticks\n        version: newest\n"),
        "14:9",
        "`latest`, `every`",
    );
    refused(
        &with_job("      - get: ticks\n        version: { n: [1] }\n"),
        "14:18",
        "must be a string",
    );
}

#[test]
fn version_belongs_on_a_get_and_every_on_the_plan() {
    refused(
        &with_job("      - put: ticks\n        version: latest\n"),
        "14:18",
        "`version`",
    );
    refused(
        &with_job("      - do:\n          - get: ticks\n            version: every\n"),
        "15:22",
        "only works on a get of the job's plan",
    );
}

#[test]
fn a_type_entry_needs_its_scripts_as_text_and_a_real_timeout() {
    refused(
        "resource_types:\n  - name: t\n    config: [check]\njobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n",
        "3:13",
        "wrong type",
    );
    refused(
        "resource_types:\n  - name: t\n    timeout: forever\n    config: { check: 'true' }\njobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n",
        "3:14",
        "not a duration",
    );
    refused(
        "resource_types:\n  - name: t\n    config: { chek: 'true' }\njobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n",
        "3:15",
        "unknown key `chek`",
    );
}

#[test]
fn a_resource_type_must_exist_and_have_the_script_a_step_needs() {
    refused(
        "resources:\n  - name: r\n    type: nope\n    source: {}\njobs:\n  - name: a\n    plan:\n      - get: r\n",
        "3:11",
        "neither built in nor under `resource_types:`",
    );
    refused(&with_job("      - put: ticks\n"), "13:14", "has none");
    refused(
        "resource_types:\n  - name: git\n    config: { check: 'true' }\njobs:\n  - name: a\n    plan:\n      - task: x\n        run: 'true'\n",
        "2:11",
        "is built in",
    );
}

#[test]
fn version_history_is_a_count() {
    refused(
        &format!(
            "defaults:\n  version_history: lots\n{}",
            with_job("      - get: ticks\n")
        ),
        "2:20",
        "wrong type",
    );
}

#[test]
fn a_built_in_types_unusable_source_is_refused_at_load_at_the_resource() {
    // Before the types were resolved at load, each of these loaded and only a get failed.
    let plan = "jobs:\n  - name: a\n    plan:\n      - get: r\n";
    refused(
        &format!("resources:\n  - name: r\n    type: git\n    source: {{ branch: main }}\n{plan}"),
        "2:11",
        "resource `r` needs `source: { uri: ..., branch: ... }` with string values",
    );
    refused(
        &format!("resources:\n  - name: r\n    type: git\n    source: {{ uri: 7 }}\n{plan}"),
        "2:11",
        "with string values",
    );
    refused(
        &format!("resources:\n  - name: r\n    type: time\n    source: {{ interval: 0s }}\n{plan}"),
        "2:11",
        "resource `r`: `interval` must be more than zero",
    );
    refused(
        &format!(
            "resources:\n  - name: r\n    type: time\n    source: {{ schedule: 'not cron' }}\n{plan}"
        ),
        "2:11",
        "is not a cron pattern",
    );
    refused(
        &format!("resources:\n  - name: r\n    type: time\n    source: {{}}\n{plan}"),
        "2:11",
        "`source:` needs `interval:`",
    );
}
