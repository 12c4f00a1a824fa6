//! `--resume` reuses a step of the resumed run only when the step's key is unchanged (the
//! rule `plan` uses): an edited step, a step downstream of it, and the steps of a different
//! pipeline file run again.

use crate::common;

use common::Fixture;

/// Names of the steps the transcript shows as replayed.
fn cached(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix("↺ "))
        .filter_map(|r| r.split(" [").next())
        .map(str::to_owned)
        .collect()
}

const FAILS_AT_THREE: &str = r#"
plan:
  - task: one
    outputs: [o]
    run: echo ORIGINAL > o/v
  - task: two
    inputs: [o]
    run: cat o/v
  - task: three
    run: exit 1
"#;

#[test]
fn resume_runs_again_a_step_whose_configuration_changed() {
    let f = Fixture::new(FAILS_AT_THREE);
    f.treadle(&["run"]).expect_code(1);
    // The user fixes step one's command (and three) and resumes.
    let fixed = FAILS_AT_THREE
        .replace("echo ORIGINAL", "echo FIXED")
        .replace("exit 1", "true");
    std::fs::write(f.file(), fixed).unwrap();
    let r = f.treadle(&["run", "--resume", "1"]);
    r.expect_code(0);
    let out = r.stdout();
    assert!(
        cached(&out).is_empty(),
        "step one changed and two reads its output: nothing may be reused\n{out}"
    );
    assert!(out.contains("FIXED") && !out.contains("ORIGINAL"), "{out}");
}

#[test]
fn resume_keeps_unchanged_steps_before_the_change() {
    let f = Fixture::new(FAILS_AT_THREE);
    f.treadle(&["run"]).expect_code(1);
    std::fs::write(f.file(), FAILS_AT_THREE.replace("exit 1", "true")).unwrap();
    let r = f.treadle(&["run", "--resume", "1"]);
    r.expect_code(0);
    assert_eq!(cached(&r.stdout()), ["one", "two"], "{}", r.stdout());
}

#[test]
fn resume_with_a_different_pipeline_file_replays_none_of_the_other_files_steps() {
    let f = Fixture::new(FAILS_AT_THREE);
    f.treadle(&["run"]).expect_code(1);
    let other = r#"
plan:
  - task: first
    outputs: [o]
    run: echo OTHER > o/v
  - task: second
    inputs: [o]
    run: cat o/v
"#;
    std::fs::write(f.path().join("other.yml"), other).unwrap();
    let r = f.treadle(&["run", "--resume", "1", "other.yml"]);
    r.expect_code(0);
    let out = r.stdout();
    assert!(cached(&out).is_empty(), "{out}");
    assert!(out.contains("OTHER") && !out.contains("ORIGINAL"), "{out}");
}
