//! `across:`: each cell cached on its own (a changed value re-runs only its cells, and
//! `plan` says so; a failed cell is not cached, a collecting cell never is), and, over agent cells against
//! the scripted server, a `budget:` on the block that stops admitting cells once spent
//! (the plan carries on) and whose `reserve_per_cell:` holds cells back while running
//! ones have not reported.

use std::path::Path;
use std::time::Duration;

use crate::common;

use common::{Fixture, Run};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A matrix over `VALUES` whose cells and the step after it note in `$COUNT` that they ran.
const MATRIX: &str = r#"
jobs:
- name: matrix
  plan:
  - across:
    - var: v
      values: VALUES
    task: cell
    # Test bookkeeping in a file outside the step directory: not confined.
    pass_env: [COUNT, FLAG]
    confined: false
    run: echo {{ .vars.v }} >> "$COUNT"; test {{ .vars.v }} != bad || test -f "$FLAG"
  - task: after
    pass_env: [COUNT]
    confined: false
    run: echo after >> "$COUNT"
"#;

/// Runs `treadle run` on the matrix over `values`; the lines it added to `$COUNT`.
fn run_matrix(f: &Fixture, values: &str) -> (Run, Vec<String>) {
    run_matrix_with(f, values, &[])
}

/// [`run_matrix`] with more arguments to `treadle run`.
fn run_matrix_with(f: &Fixture, values: &str, more: &[&str]) -> (Run, Vec<String>) {
    std::fs::write(f.file(), MATRIX.replace("VALUES", values)).expect("write the pipeline");
    let count = f.path().join("count.txt");
    let before = lines(&count).len();
    let flag = f.path().join("flag");
    let args = [&["run"], more].concat();
    let run = f.treadle_env(
        &args,
        &[
            ("COUNT", count.to_str().expect("utf-8 path")),
            ("FLAG", flag.to_str().expect("utf-8 path")),
        ],
    );
    let added = lines(&count).split_off(before);
    (run, added)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[test]
fn a_changed_value_reruns_only_its_cell_and_the_steps_after_the_block() {
    let f = Fixture::new("");
    let (first, ran) = run_matrix(&f, "[a, b, c]");
    first.expect_code(0);
    assert_eq!(ran, ["a", "b", "c", "after"], "{}", first.stdout());
    let (second, ran) = run_matrix(&f, "[a, b, c]");
    second.expect_code(0);
    assert!(
        ran.is_empty(),
        "an unchanged cell ran again: {ran:?}\n{}",
        second.stdout()
    );
    let out = second.stdout();
    for cell in ["cell [v=a]", "cell [v=b]", "cell [v=c]"] {
        assert!(
            out.contains(&format!("↺ {cell}")),
            "{cell} not shown cached:\n{out}"
        );
    }
    // One value changed: `plan` says which cells would run...
    std::fs::write(f.file(), MATRIX.replace("VALUES", "[a, b, d]")).expect("write");
    let plan = f.treadle(&["plan"]);
    plan.expect_code(0);
    let plan = plan.stdout();
    assert!(
        plan.contains("cell [v=a] [task] cached (from run 1)"),
        "{plan}"
    );
    assert!(plan.contains("cell [v=d] [task] would run"), "{plan}");
    assert!(plan.contains("after [task] would run"), "{plan}");
    // ...and running it runs that cell, and the step chained to the block.
    let (third, ran) = run_matrix(&f, "[a, b, d]");
    third.expect_code(0);
    assert_eq!(ran, ["d", "after"], "{}", third.stdout());
}

#[test]
fn a_failed_cell_is_not_cached_and_runs_again_next_time() {
    let f = Fixture::new("");
    let (first, ran) = run_matrix(&f, "[a, bad]");
    assert_ne!(
        first.code(),
        0,
        "the bad cell must fail: {}",
        first.stdout()
    );
    assert_eq!(ran, ["a", "bad"], "{}", first.stdout());
    std::fs::write(f.path().join("flag"), "").expect("flag");
    let (second, ran) = run_matrix(&f, "[a, bad]");
    second.expect_code(0);
    assert_eq!(ran, ["bad", "after"], "{}", second.stdout());
}

#[test]
fn a_resumed_run_takes_the_cells_that_succeeded_and_runs_the_failed_one() {
    let f = Fixture::new("");
    let (first, ran) = run_matrix(&f, "[a, bad, c]");
    assert_ne!(
        first.code(),
        0,
        "the bad cell must fail: {}",
        first.stdout()
    );
    assert_eq!(ran, ["a", "bad", "c"], "{}", first.stdout());
    std::fs::write(f.path().join("flag"), "").expect("flag");
    let (resumed, ran) = run_matrix_with(&f, "[a, bad, c]", &["--resume", "1"]);
    resumed.expect_code(0);
    assert_eq!(ran, ["bad", "after"], "{}", resumed.stdout());
}

#[test]
fn a_cell_that_collects_outputs_is_never_taken_from_the_cache() {
    let yaml = r#"
jobs:
- name: review-matrix
  plan:
  - across:
    - var: dim
      values: [api, errors]
    outputs: [findings]
    task: review
    pass_env: [COUNT]
    confined: false
    run: echo {{ .vars.dim }} >> "$COUNT"; echo {{ .vars.dim }} fine > findings/report.txt
  - task: merge
    inputs: [findings]
    run: cat findings/api/report.txt findings/errors/report.txt
"#;
    let f = Fixture::new(yaml);
    let count = f.path().join("count.txt");
    let env = [("COUNT", count.to_str().expect("utf-8 path"))];
    f.treadle_env(&["run"], &env).expect_code(0);
    let second = f.treadle_env(&["run"], &env);
    second.expect_code(0);
    assert_eq!(
        lines(&count),
        ["api", "errors", "api", "errors"],
        "{}",
        second.stdout()
    );
    let out = second.stdout();
    assert!(
        out.contains("api fine") && out.contains("errors fine"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_across_budget_admits_no_more_cells_and_the_plan_goes_on() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("api looks fine").usage(900, 300),
        Reply::text("must never be asked for").usage(1, 1),
    ]))
    .await
    .expect("server");
    let yaml = r#"
agents:
- name: reviewer
jobs:
- name: bounded
  plan:
  - across:
    - var: dim
      values: [api, errors, concurrency]
    budget: { tokens: 1000 }
    agent: reviewer
    prompt: "Review the {{ .vars.dim }} dimension."
  - task: publish
    run: echo publishing what we got
  assert:
    execution: ["reviewer [dim=api]", publish]
    outcome: success
"#;
    let f = Fixture::new(yaml);
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
    .1;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("budget: across stopped before cell 2 of 3 (spent 1200 of 1000 tokens)"),
        "{out}"
    );
    assert_eq!(server.requests().len(), 1, "a second cell called the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_started_cell_runs_to_its_end_past_the_blocks_budget() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("list_dir", serde_json::json!({"path": "."})).usage(900, 300),
        Reply::text("api looks fine"),
    ]))
    .await
    .expect("server");
    let yaml = r#"
agents:
- name: reviewer
  tools: [list_dir]
jobs:
- name: bounded
  plan:
  - across:
    - var: dim
      values: [api]
    budget: { tokens: 1000 }
    agent: reviewer
    prompt: "Review the {{ .vars.dim }} dimension."
"#;
    let (_f, run) = Fixture::new(yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    assert!(run.stdout().contains("api looks fine"), "{}", run.stdout());
    assert_eq!(
        server.requests().len(),
        2,
        "the cell was cut off mid-flight"
    );
}

/// Three agent cells, each answering after a delay, at most three at once, under a
/// `budget:` of 1000 tokens with `RESERVE`.
const PACED: &str = r#"
agents:
- name: reviewer
jobs:
- name: paced
  plan:
  - across:
    - var: dim
      values: [api, errors, concurrency]
    max_in_flight: 3
    budget: { tokens: 1000 RESERVE }
    agent: reviewer
    prompt: "Review the {{ .vars.dim }} dimension."
"#;

/// Runs the paced matrix; its output, and whether any cell started before an earlier one
/// finished.
async fn run_paced(reserve: &str) -> (Run, bool) {
    let replies = (0..3).map(|i| Reply::text(format!("looked at {i}")).usage(60, 40));
    let server = ScriptedServer::builder()
        .chunk_delay(Duration::from_millis(150))
        .start(Script::new(replies))
        .await
        .expect("server");
    let f = Fixture::new(&PACED.replace("RESERVE", reserve));
    let (_f, run) = f.run_at(server.base_url()).await;
    let out = run.stdout();
    let mut running = 0;
    let mut overlapped = false;
    for line in out.lines().map(str::trim_start) {
        if line.starts_with("▶ reviewer [dim=") {
            running += 1;
            overlapped |= running > 1;
        } else if line.starts_with("✓ reviewer [dim=") || line.starts_with("✗ reviewer [dim=") {
            running -= 1;
        }
    }
    (run, overlapped)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_holds_cells_back_until_running_ones_report() {
    // Without a reservation, the three cells start together (and the run says the ceiling
    // cannot hold any back)...
    let (blind, overlapped) = run_paced("").await;
    blind.expect_code(0);
    assert!(overlapped, "the cells did not overlap:\n{}", blind.stdout());
    assert!(
        blind.stdout().contains("nothing reserved per cell"),
        "{}",
        blind.stdout()
    );
    // ...with 600 reserved per cell, a second reservation would pass 1000, so each cell
    // waits for the one before it to report; all three still run (each spends 100).
    let (reserved, overlapped) = run_paced(", reserve_per_cell: 600").await;
    reserved.expect_code(0);
    assert!(!overlapped, "cells ran at once:\n{}", reserved.stdout());
    assert_eq!(
        reserved.stdout().matches("looked at").count(),
        3,
        "{}",
        reserved.stdout()
    );
}

#[test]
fn reserve_per_cell_outside_an_across_block_and_usd_on_one_are_refused() {
    let yaml = r#"
agents:
- name: reviewer
  budget: { tokens: 100, reserve_per_cell: 10 }
jobs:
- name: j
  budget: { tokens: 100, reserve_per_cell: 10 }
  plan:
  - across:
    - var: dim
      values: [api]
    budget: { usd: 1.5 }
    agent: reviewer
    prompt: "Review {{ .vars.dim }}."
"#;
    let run = Fixture::new(yaml).treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(
            "treadle.yml:4:44: `budget.reserve_per_cell` of agent `reviewer` paces nothing"
        ),
        "{err}"
    );
    assert!(
        err.contains("treadle.yml:7:44: `budget.reserve_per_cell` of job `j` paces nothing"),
        "{err}"
    );
    assert!(err.contains("`budget.usd` on the `across:` step"), "{err}");
}

/// One `across:` task with `run` as its command, then `more` (keys of the step).
fn across_task(run: &str, more: &str) -> String {
    format!(
        "jobs:\n- name: j\n  plan:\n  - across:\n    - var: dim\n      values: [api]\n    task: t\n    run: {run}\n{more}"
    )
}

#[test]
fn a_cells_texts_are_one_template_and_an_unknown_name_is_a_load_error() {
    // The engine of resource scripts, and its rule: `.State` is no field of a cell, so the
    // file does not load (it used to reach the shell as written).
    let yaml = across_task("docker inspect --format '{{ .State }}' {{ .vars.dim }}", "");
    let run = Fixture::new(&yaml).treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(err.contains("cannot be filled in per cell"), "{err}");
    assert!(err.contains("`.State` is not set"), "{err}");
    // Its functions work in a cell, and literal braces are written as a string.
    let yaml = across_task(
        r#"echo '{{ "{{" }}x}} {{ .vars.dim | upper }}'"#,
        "    assert: { stdout: \"{{x}} API\" }\n  assert:\n    outcome: succeeded\n",
    );
    let run = Fixture::new(&yaml).treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
}
