//! `keep_on_failure: true` through the `treadle` binary (issue 40): a failed step's outputs
//! kept in `<run>/kept/<step>/`, listed in its record (`runs --steps`, the API), a
//! `--rerun` of the step started from them, and never a cache hit: neither the kept
//! outputs nor the outcome of a step that started from them are replayed.

use crate::common;

use common::Fixture;
use common::server::{Server, get};

/// `convert` fails the first time (it writes half its rows), and finishes what it finds
/// when its rows are already there; `after` reads its output.
const CONVERT: &str = r#"
jobs:
  - name: migrate
    plan:
      - task: convert
        keep_on_failure: true
        outputs: [rows]
        run: |
          if [ -f rows/part1 ]; then echo second > rows/part2; exit 0; fi
          echo first > rows/part1
          exit 1
      - task: after
        inputs: [rows]
        run: cat rows/part1 rows/part2
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_step_keeps_its_outputs_and_a_rerun_starts_from_them_but_never_replays_them() {
    let f = Fixture::new(CONVERT);
    let failed = f.treadle(&["run"]);
    failed.expect_code(1);
    let kept = f.path().join(".treadle/runs/1/kept/convert/rows/part1");
    assert_eq!(
        std::fs::read_to_string(&kept).ok().as_deref(),
        Some("first\n"),
        "{}",
        failed.stdout()
    );
    // The transcript says where, and how to start from them: the command as printed runs.
    let out = failed.stdout();
    let hint = out
        .lines()
        .find(|l| l.contains("keep_on_failure"))
        .unwrap_or_else(|| panic!("no note of the kept outputs: {out}"));
    assert!(hint.contains("kept/convert"), "{hint}");
    let command = hint
        .split('`')
        .find(|part| part.starts_with("treadle run"))
        .unwrap_or_else(|| panic!("no command in {hint}"));
    assert_eq!(command, "treadle run treadle.yml --rerun convert", "{hint}");
    let steps = f.treadle(&["runs", "--steps", "1"]);
    assert!(
        steps.stdout().contains("kept: rows in runs/1/kept/convert"),
        "{}",
        steps.stdout()
    );

    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let rerun = f.treadle(&args);
    rerun.expect_code(0);
    let out = rerun.stdout();
    assert!(out.contains("first") && out.contains("second"), "{out}");
    assert!(
        out.contains("`convert` starts from the outputs (rows) it kept when it failed in run 1"),
        "{out}"
    );
    let steps = f.treadle(&["runs", "--steps", "2"]);
    assert!(
        steps
            .stdout()
            .contains("started from the outputs run 1 kept"),
        "{}",
        steps.stdout()
    );

    // An ordinary run neither replays the step that started from kept outputs nor starts
    // from them: `convert` runs afresh, and fails as it did the first time.
    let again = f.treadle(&["run"]);
    assert_eq!(again.code(), 1, "{}", again.stdout());
    assert!(!again.stdout().contains("↺ convert"), "{}", again.stdout());

    // The API lists what each run kept and started from.
    let served = Server::start(f.path(), &["treadle.yml"], &[]);
    let (code, run1) = get(&served, "/api/v1/runs/1").await;
    assert_eq!(code, 200, "{run1}");
    let step = |view: &serde_json::Value| {
        view["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "convert").cloned())
            .unwrap_or_default()
    };
    assert_eq!(
        step(&run1)["kept"],
        serde_json::json!({"dir": "runs/1/kept/convert", "outputs": ["rows"]}),
        "{run1}"
    );
    let (_, run2) = get(&served, "/api/v1/runs/2").await;
    assert_eq!(step(&run2)["from_kept"], 1, "{run2}");
    assert!(step(&run2).get("kept").is_none(), "{run2}");
}

#[test]
fn without_the_key_a_rerun_starts_afresh_and_nothing_is_kept() {
    let f = Fixture::new(&CONVERT.replace("        keep_on_failure: true\n", ""));
    f.treadle(&["run"]).expect_code(1);
    assert!(!f.path().join(".treadle/runs/1/kept").exists());
    let rerun = f.treadle(&["run", "--rerun", "convert"]);
    assert_eq!(rerun.code(), 1, "{}", rerun.stdout());
}

#[test]
fn a_rerun_takes_the_newest_kept_outputs_and_none_once_the_step_ran_again() {
    let f = Fixture::new(CONVERT);
    f.treadle(&["run"]).expect_code(1);
    f.treadle(&["run", "--rerun", "convert"]).expect_code(0);
    // Run 2 ran `convert` after run 1 kept its rows: those are out of date.
    let stale = f.treadle(&["run", "--rerun", "convert"]);
    assert_eq!(stale.code(), 1, "{}", stale.stdout());
    assert!(
        !stale.stdout().contains("starts from the outputs"),
        "{}",
        stale.stdout()
    );
    // Run 3 kept its own; a hand-made fix of them is what the next rerun starts from.
    std::fs::write(
        f.path().join(".treadle/runs/3/kept/convert/rows/part1"),
        "fixed by hand\n",
    )
    .unwrap();
    let rerun = f.treadle(&["run", "--rerun", "convert"]);
    rerun.expect_code(0);
    let out = rerun.stdout();
    assert!(
        out.contains("fixed by hand") && out.contains("in run 3"),
        "{out}"
    );
}

#[test]
fn keep_on_failure_is_refused_where_it_would_keep_nothing() {
    let no_outputs = "jobs:\n  - name: j\n    plan:\n      - task: t\n        keep_on_failure: true\n        run: exit 1\n";
    let run = Fixture::new(no_outputs).treadle(&["validate"]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("treadle.yml:5:26: ")
            && run
                .stderr()
                .contains("`keep_on_failure:` on a step without `outputs:`"),
        "{}",
        run.stderr()
    );
    let approval =
        "jobs:\n  - name: j\n    plan:\n      - approval: ok\n        keep_on_failure: true\n";
    let run = Fixture::new(approval).treadle(&["validate"]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("`keep_on_failure` does not belong on a `approval` step"),
        "{}",
        run.stderr()
    );
}
