//! Every bad pipeline is refused with exit code 2, one located message and a hint.

use crate::common;

use common::Fixture;

/// Runs `treadle run` on the YAML and checks exit 2, the location and a message fragment.
fn refused(yaml: &str, at: Option<&str>, what: &str) -> String {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["run"]);
    run.expect_code(2);
    let err = run.stderr();
    if let Some(at) = at {
        assert!(
            err.contains(&format!("treadle.yml:{at}: ")),
            "expected location {at} in:\n{err}"
        );
    }
    assert!(err.contains(what), "expected `{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "expected a hint in:\n{err}");
    // validate refuses it the same way.
    f.treadle(&["validate"]).expect_code(2);
    err
}

#[test]
fn yaml_syntax_error() {
    let err = refused(
        "jobs:\n  - name: a\n    plan: [\n      - task: x\n",
        None,
        "YAML syntax error",
    );
    assert!(err.contains("treadle.yml:"), "{err}");
}

#[test]
fn unknown_key() {
    let err = refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        ouputs: [o]\n        run: true\n",
        Some("5:9"),
        "unknown key `ouputs`",
    );
    assert!(err.contains("did you mean `outputs`"), "{err}");
}

#[test]
fn wrong_type() {
    refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n        attempts: many\n",
        Some("6:19"),
        "wrong type",
    );
}

#[test]
fn input_nobody_produces() {
    let err = refused(
        "jobs:\n  - name: a\n    plan:\n      - task: make\n        outputs: [built]\n        run: true\n      - task: use\n        inputs: [biult]\n        run: true\n",
        Some("8:18"),
        "input `biult` is not produced by any earlier step",
    );
    assert!(err.contains("did you mean `built`"), "{err}");
}

#[test]
fn unknown_agent() {
    refused(
        "agents:\n  - name: reviewer\njobs:\n  - name: a\n    plan:\n      - agent: reveiwer\n        prompt: hi\n",
        Some("6:16"),
        "unknown agent `reveiwer`",
    );
}

#[test]
fn a_prompt_given_twice() {
    // `prompt:` beside `prompt_file: { artifact, path }` was read as the file then the
    // prompt; the instruction is one thing, so two of its keys are refused at load.
    refused(
        "agents:\n  - name: r\njobs:\n  - name: a\n    plan:\n      - task: t\n        outputs: [repo]\n        run: true\n      - agent: r\n        inputs: [repo]\n        prompt: hi\n        prompt_file: { artifact: repo, path: x.md }\n",
        Some("9:16"),
        "an agent step takes one of `prompt:`, `prompt_file:`, not several",
    );
}

#[test]
fn an_unknown_agent_and_the_rest_of_the_file_reported_together() {
    // The unknown agent is found when the step is typed; the checks after typing still
    // report the file's other problems in the same run.
    let err = refused(
        "agents:\n  - name: reviewer\njobs:\n  - name: a\n    plan:\n      - agent: reveiwer\n        prompt: hi\n        inputs: [nothing]\n",
        Some("6:16"),
        "unknown agent `reveiwer`",
    );
    assert!(err.contains("did you mean `reviewer`"), "{err}");
    assert!(
        err.contains("input `nothing` is not produced by any earlier step"),
        "{err}"
    );
}

#[test]
fn escalation_to_an_unknown_agent() {
    refused(
        "agents:\n  - name: r\njobs:\n  - name: a\n    plan:\n      - agent: r\n        prompt: decide\n        verdicts: [approve, reject]\n        min_confidence: 0.8\n        escalate_to: boss\n",
        Some("10:22"),
        "`escalate_to: boss` names no agent",
    );
}

#[test]
fn verdict_to_missing_step() {
    refused(
        "agents:\n  - name: r\njobs:\n  - name: a\n    plan:\n      - agent: r\n        prompt: decide\n        verdicts:\n          - approve: publish\n      - task: publsh\n        run: true\n",
        Some("9:22"),
        "routes to `publish`, which is not a step",
    );
}

#[test]
fn backward_route_without_max_visits() {
    refused(
        "agents:\n  - name: r\njobs:\n  - name: a\n    plan:\n      - task: draft\n        run: true\n      - agent: r\n        prompt: decide\n        verdicts:\n          - again: draft\n          - done: next\n",
        Some("11:20"),
        "routes back to `draft` without a bound",
    );
}

#[test]
fn backward_route_with_max_visits_loads() {
    let f = Fixture::new(
        "agents:\n  - name: r\njobs:\n  - name: a\n    plan:\n      - task: draft\n        max_visits: 3\n        run: true\n      - agent: r\n        prompt: decide\n        verdicts:\n          - again: draft\n          - done: next\n",
    );
    f.treadle(&["plan"]).expect_code(0);
}

#[test]
fn missing_api_key_variable() {
    let err = refused(
        "agents:\n  - name: r\n    source: { model: openai/gpt-4o-mini }\njobs:\n  - name: a\n    plan:\n      - agent: r\n        prompt: hi\n",
        Some("3:22"),
        "OPENAI_API_KEY is not set",
    );
    assert!(err.contains("export OPENAI_API_KEY"), "{err}");
}

#[test]
fn named_key_variable_missing() {
    refused(
        "agents:\n  - name: r\n    source: { model: acme/m, endpoint: \"http://127.0.0.1:9/v1\", api_key_env: ACME_KEY_FOR_TEST }\njobs:\n  - name: a\n    plan:\n      - agent: r\n        prompt: hi\n",
        Some("3:78"),
        "ACME_KEY_FOR_TEST is not set",
    );
}

#[test]
fn step_without_kind_and_task_without_run() {
    refused(
        "jobs:\n  - name: a\n    plan:\n      - inputs: []\n",
        Some("4:9"),
        "this step has no kind",
    );
    refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n",
        Some("4:9"),
        "has no `run:`",
    );
}

#[test]
fn missing_file() {
    let f = Fixture::new("jobs: []\n");
    let run = f.treadle(&["run", "nope.yml"]);
    run.expect_code(2);
    assert!(
        run.stderr().contains("cannot read the pipeline file"),
        "{}",
        run.stderr()
    );
}

#[test]
fn unknown_job() {
    let f = Fixture::new("jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n");
    let run = f.treadle(&["run", "--job", "b"]);
    run.expect_code(2);
    assert!(
        run.stderr().contains("there is no job `b`"),
        "{}",
        run.stderr()
    );
}

#[test]
fn output_names_that_leave_the_step_directory_are_refused() {
    for (name, col) in [
        ("/srv/site", "19"),
        ("../../src", "19"),
        ("build/out", "19"),
    ] {
        let yaml = format!(
            "jobs:\n  - name: a\n    plan:\n      - task: x\n        outputs: [\"{name}\"]\n        run: true\n"
        );
        let err = refused(&yaml, Some(&format!("5:{col}")), &format!("`{name}`"));
        assert!(err.contains("artifact name"), "{err}");
    }
    // The same rule for inputs and a `get`'s artifact.
    refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        inputs: [..]\n        run: true\n",
        Some("5:18"),
        "`..`",
    );
}

#[test]
fn a_wrong_type_names_its_key() {
    refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n        attempts: many\n",
        Some("6:19"),
        "wrong type for `attempts`: expected a whole number",
    );
}

#[test]
fn a_string_where_a_list_belongs_is_a_type_error_naming_the_key() {
    let err = refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        outputs: dist\n        run: true\n",
        Some("5:18"),
        "wrong type for `outputs`: expected a list",
    );
    assert!(!err.contains("syntax"), "{err}");
}

#[test]
fn load_errors_do_not_leak_parser_internals() {
    let dup = refused(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        attempts: 1\n        attempts: 2\n        run: true\n",
        Some("6:9"),
        "key `attempts` appears twice",
    );
    assert!(!dup.contains("DuplicateKeyPolicy"), "{dup}");
    let deep = format!("jobs: {}{}\n", "[".repeat(5000), "]".repeat(5000));
    let err = refused(
        &deep,
        None,
        "too large to load: lists and mappings nested too deeply",
    );
    assert!(!err.contains("recursion"), "{err}");
    let many = format!(
        "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n        inputs: [{}]\n",
        "a,".repeat(300_000)
    );
    let err = refused(&many, None, "too large to load: too many YAML values");
    assert!(!err.contains("Nodes {") && !err.contains("budget"), "{err}");
}

#[test]
fn a_device_or_an_oversized_file_is_refused_with_the_limit() {
    let f = Fixture::new("jobs: []\n");
    let r = f.treadle(&["validate", "/dev/zero"]);
    r.expect_code(2);
    assert!(r.stderr().contains("not a regular file"), "{}", r.stderr());
    let big = format!("# {}\n", "x".repeat(2 * 1024 * 1024));
    std::fs::write(f.file(), big).unwrap();
    let r = f.treadle(&["validate"]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("pipeline file size limit (1048576 bytes)"),
        "{}",
        r.stderr()
    );
    // The limit is configurable.
    let r = f.treadle_env(&["validate"], &[("TREADLE_MAX_PIPELINE_BYTES", "100")]);
    assert!(r.stderr().contains("(100 bytes)"), "{}", r.stderr());
}

#[test]
fn a_billion_laughs_is_refused_with_a_sentence() {
    // Nine levels of aliases of nine aliases each: 387 million values once expanded.
    let mut yaml = String::from("resources:\n  - name: r\n    type: time\n    source:\n");
    yaml.push_str("      a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    let levels = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in levels.windows(2) {
        let refs = vec![format!("*{}", pair[0]); 9].join(", ");
        yaml.push_str(&format!("      {0}: &{0} [{refs}]\n", pair[1]));
    }
    yaml.push_str("plan:\n  - task: t\n    run: 'true'\n");
    let err = refused(
        &yaml,
        None,
        "the pipeline is too large to load: its aliases (`*name`) expand to too many YAML values",
    );
    assert!(err.contains("billion laughs"), "{err}");
    assert!(
        !err.contains("budget") && !err.contains("Nodes {") && !err.contains("quot"),
        "{err}"
    );
}

#[test]
fn a_duration_outside_the_documented_forms_is_refused_with_them() {
    // `1h30m` and `500ms` are fine; words, spaces and unknown units are not.
    for good in ["90s", "5m", "1h30m", "500ms", "45"] {
        let f = Fixture::new(&format!(
            "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n        timeout: {good}\n"
        ));
        f.treadle(&["validate"]).expect_code(0);
    }
    for bad in [
        "5 minutes",
        "1 hour",
        "10 m",
        "5mins",
        "5x",
        "five",
        "1h 30m",
    ] {
        let err = refused(
            &format!(
                "jobs:\n  - name: a\n    plan:\n      - task: x\n        run: true\n        timeout: {bad}\n"
            ),
            Some("6:18"),
            &format!("invalid value for `timeout`: `{bad}` is not a duration"),
        );
        assert!(err.contains("90s, 5m, 1h30m or 500ms"), "{bad}: {err}");
        // Our words, not the parser library's.
        assert!(
            !err.contains("supported units") && !err.contains("expected number"),
            "{bad}: {err}"
        );
    }
}
