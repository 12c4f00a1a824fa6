//! Tests of `assert`.

use serde_json::json;

use super::*;

fn call(name: &str, arguments: serde_json::Value) -> RecordedCall {
    RecordedCall {
        name: name.into(),
        arguments,
        result: String::new(),
        is_error: false,
    }
}

fn facts<'a>(dir: &'a Path, calls: &'a [RecordedCall]) -> StepFacts<'a> {
    StepFacts {
        dir,
        stdout: "all good here",
        stderr: "warning: disk nearly full",
        code: Some(0),
        verdict: Some("approve"),
        tool_calls: calls,
    }
}

fn expect(name: &str, args: Option<serde_json::Value>) -> ToolCallAssert {
    ToolCallAssert {
        name: name.into(),
        args,
        ok: None,
    }
}

#[test]
fn files_must_exist_be_non_empty_and_inside() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("report/empty-dir")).unwrap();
    std::fs::write(dir.path().join("report/summary.md"), "risk: low").unwrap();
    std::fs::write(dir.path().join("report/blank.md"), "").unwrap();
    let spec = StepAssert {
        files: vec![
            "report/summary.md".into(),
            "report".into(),
            "report/blank.md".into(),
            "report/empty-dir".into(),
            "report/missing.md".into(),
            "../elsewhere".into(),
        ],
        ..StepAssert::default()
    };
    let failures = check_step(&spec, &facts(dir.path(), &[]));
    let messages: Vec<String> = failures.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "assert files: report/blank.md is empty",
            "assert files: report/empty-dir is empty",
            "assert files: report/missing.md was not written (it does not exist)",
            r#"assert files: ../elsewhere is not inside the step directory: path "../elsewhere" is outside the step directory; use a path relative to it"#,
        ]
    );
}

#[test]
fn a_missing_step_directory_means_nothing_was_written() {
    let spec = StepAssert {
        files: vec!["report/summary.md".into()],
        ..StepAssert::default()
    };
    let failures = check_step(&spec, &facts(Path::new("/nonexistent/step"), &[]));
    assert!(matches!(failures[..], [AssertFailure::FileMissing { .. }]));
}

#[test]
fn stdout_code_and_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let pass = StepAssert {
        stdout: Some("good".into()),
        code: Some(0),
        verdict: Some("approve".into()),
        ..StepAssert::default()
    };
    assert!(check_step(&pass, &facts(dir.path(), &[])).is_empty());

    let fail = StepAssert {
        stdout: Some("bad".into()),
        code: Some(2),
        verdict: Some("reject".into()),
        ..StepAssert::default()
    };
    let mut step = facts(dir.path(), &[]);
    step.verdict = None;
    step.code = None;
    let messages: Vec<String> = check_step(&fail, &step)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        messages,
        [
            r#"assert stdout: the output does not contain "bad"; it ends with: "all good here""#,
            "assert code: expected exit code 2, got none (the step has no exit code)",
            r#"assert verdict: expected "reject", got no verdict"#,
        ]
    );
}

#[test]
fn ok_true_takes_only_a_call_that_succeeded_and_names_the_failed_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut failed = call("edit_file", json!({"path": "calc.py"}));
    failed.is_error = true;
    failed.result = "old_string was not found in \"calc.py\"\nmore".into();
    let calls = [failed.clone()];
    let mut want = expect("edit_file", None);
    assert!(
        check_step(
            &StepAssert {
                tool_calls: vec![want.clone()],
                ..Default::default()
            },
            &facts(dir.path(), &calls)
        )
        .is_empty(),
        "without ok: a failed call still counts as made"
    );
    want.ok = Some(true);
    let spec = StepAssert {
        tool_calls: vec![want],
        ..Default::default()
    };
    let failures = check_step(&spec, &facts(dir.path(), &calls));
    assert_eq!(
        failures.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            r#"assert tool_calls: expected call #1 edit_file to succeed, but edit_file {"path":"calc.py"} failed: old_string was not found in "calc.py""#
        ]
    );
    let calls = [failed, call("edit_file", json!({"path": "calc.py"}))];
    assert!(
        check_step(&spec, &facts(dir.path(), &calls)).is_empty(),
        "a later success counts"
    );
}

#[test]
fn stdout_names_text_found_in_stderr_and_output_reads_both_streams() {
    let dir = tempfile::tempdir().unwrap();
    let misses = StepAssert {
        stdout: Some("disk nearly full".into()),
        ..StepAssert::default()
    };
    assert_eq!(
        check_step(&misses, &facts(dir.path(), &[]))[0].to_string(),
        r#"assert stdout: the output does not contain "disk nearly full", but stderr does (the command wrote it there); redirect it with `2>&1`, or assert `output: "disk nearly full"`, which reads both streams"#
    );
    for text in ["disk nearly full", "all good"] {
        let either = StepAssert {
            output: Some(text.into()),
            ..StepAssert::default()
        };
        assert!(check_step(&either, &facts(dir.path(), &[])).is_empty());
    }
    let neither = StepAssert {
        output: Some("PELICAN".into()),
        ..StepAssert::default()
    };
    assert_eq!(
        check_step(&neither, &facts(dir.path(), &[]))[0].to_string(),
        r#"assert output: neither stdout nor stderr contains "PELICAN"; the output ends with: "all good herewarning: disk nearly full""#
    );
}

#[test]
fn tool_calls_are_an_ordered_subsequence_with_subset_args() {
    let dir = tempfile::tempdir().unwrap();
    let made = [
        call("list_dir", json!({})),
        call("read_file", json!({"path": "in/a.txt"})),
        call(
            "write_file",
            json!({"path": "out/answer.txt", "content": "42"}),
        ),
    ];
    let ok = StepAssert {
        tool_calls: vec![
            expect("read_file", None),
            expect("write_file", Some(json!({"path": "out/answer.txt"}))),
        ],
        ..StepAssert::default()
    };
    assert!(check_step(&ok, &facts(dir.path(), &made)).is_empty());

    let wrong_order = StepAssert {
        tool_calls: vec![expect("write_file", None), expect("read_file", None)],
        ..StepAssert::default()
    };
    let failures = check_step(&wrong_order, &facts(dir.path(), &made));
    assert_eq!(
        failures[0].to_string(),
        r#"assert tool_calls: expected call #2 read_file was not made after call #3; calls made: list_dir {}, read_file {"path":"in/a.txt"}, write_file {"content":"42","path":"out/answer.txt"}"#
    );

    let wrong_args = StepAssert {
        tool_calls: vec![expect("read_file", Some(json!({"path": "in/b.txt"})))],
        ..StepAssert::default()
    };
    let failures = check_step(&wrong_args, &facts(dir.path(), &[]));
    assert_eq!(
        failures[0].to_string(),
        r#"assert tool_calls: expected call #1 read_file {"path":"in/b.txt"} was not made; calls made: none"#
    );
}

#[test]
fn json_subset_rules() {
    assert!(json_subset(
        &json!({"a": {"b": 1}}),
        &json!({"a": {"b": 1, "c": 2}, "d": 3})
    ));
    assert!(!json_subset(&json!({"a": 1}), &json!({"a": "1"})));
    assert!(!json_subset(&json!({"a": 1}), &json!({})));
    assert!(json_subset(&json!([{"x": 1}]), &json!([{"x": 1, "y": 2}])));
    assert!(!json_subset(&json!([1]), &json!([1, 2])));
    assert!(json_subset(&json!("s"), &json!("s")));
}

#[test]
fn job_execution_and_outcome() {
    let ran = vec![
        "build".to_owned(),
        "review".to_owned(),
        "publish".to_owned(),
    ];
    let facts = JobFacts {
        executed: &ran,
        outcome: JobOutcome::Success,
    };
    let pass = JobAssert {
        execution: Some(ran.clone()),
        outcome: Some("success".into()),
    };
    assert!(check_job(&pass, &facts).is_empty());

    let fail = JobAssert {
        execution: Some(vec!["build".into(), "escalate".into()]),
        outcome: Some("failure".into()),
    };
    let messages: Vec<String> = check_job(&fail, &facts)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        messages,
        [
            "assert execution: expected the steps [build, escalate] to run, but [build, review, publish] ran",
            "assert outcome: expected failure, the job ended in success",
        ]
    );
    let bad = JobAssert {
        execution: None,
        outcome: Some("green".into()),
    };
    assert_eq!(
        check_job(&bad, &facts)[0].to_string(),
        r#"assert outcome: "green" is not an outcome; use success or failure"#
    );
}
