//! Running steps again through the `treadle` binary: `--force` (nothing from the cache, and
//! what ran is stored for the next run), `--rerun STEP` (the step and what chains to it),
//! and failures that explain themselves: the step that failed the job, the `--rerun` hint
//! after a cached agent step, a `stdout:` assert whose text went to stderr, `output:`,
//! and a confined command refused a path outside its directory.

use crate::common;

use common::{Fixture, Run};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Each task appends its name to `$COUNT` (outside the step directory: not confined).
const COUNTED: &str = r#"
jobs:
  - name: build
    plan:
      - task: first
        pass_env: [COUNT]
        confined: false
        outputs: [a]
        run: echo first >> "$COUNT"; echo 1 > a/n.txt
      - in_parallel:
          - task: left
            pass_env: [COUNT]
            confined: false
            inputs: [a]
            run: echo left >> "$COUNT"
          - task: right
            pass_env: [COUNT]
            confined: false
            inputs: [a]
            run: echo right >> "$COUNT"
      - task: last
        pass_env: [COUNT]
        confined: false
        run: echo last >> "$COUNT"
"#;

/// Runs `treadle ARGS` on `f` and returns the names the tasks appended to `$COUNT` during
/// this run, sorted (parallel branches may append in either order).
fn ran(f: &Fixture, args: &[&str]) -> (Run, Vec<String>) {
    let count = f.path().join("count.txt");
    let _ = std::fs::remove_file(&count);
    let run = f.treadle_env(args, &[("COUNT", count.to_str().unwrap())]);
    let mut names: Vec<String> = std::fs::read_to_string(&count)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    (run, names)
}

#[test]
fn force_runs_every_step_and_the_next_ordinary_run_replays_them() {
    let f = Fixture::new(COUNTED);
    let all = ["first", "last", "left", "right"];
    let (run, names) = ran(&f, &["run"]);
    run.expect_code(0);
    assert_eq!(names, all);
    let (run, names) = ran(&f, &["run"]);
    run.expect_code(0);
    assert!(names.is_empty(), "an ordinary run replays: {names:?}");
    let (run, names) = ran(&f, &["run", "--force"]);
    run.expect_code(0);
    assert_eq!(names, all, "{}", run.stdout());
    assert!(!run.stdout().contains("cached"), "{}", run.stdout());
    // What the forced run ran was recorded: the next ordinary run repeats none of it.
    let (run, names) = ran(&f, &["run"]);
    run.expect_code(0);
    assert!(names.is_empty(), "{names:?}\n{}", run.stdout());
    assert!(
        run.stdout().contains("cached from run 3"),
        "{}",
        run.stdout()
    );
}

#[test]
fn rerun_runs_the_step_and_what_chains_to_it_but_not_its_sibling_branch() {
    let f = Fixture::new(COUNTED);
    ran(&f, &["run"]).0.expect_code(0);
    let (run, names) = ran(&f, &["run", "--rerun", "left"]);
    run.expect_code(0);
    assert_eq!(names, ["last", "left"], "{}", run.stdout());
    let (run, names) = ran(&f, &["run", "--rerun", "first"]);
    run.expect_code(0);
    assert_eq!(
        names,
        ["first", "last", "left", "right"],
        "{}",
        run.stdout()
    );
    let (run, names) = ran(&f, &["run", "--rerun", "last"]);
    run.expect_code(0);
    assert_eq!(names, ["last"], "{}", run.stdout());
}

#[test]
fn rerun_of_a_step_the_job_lacks_is_a_configuration_error() {
    let f = Fixture::new(COUNTED);
    let (run, names) = ran(&f, &["run", "--rerun", "lefty"]);
    run.expect_code(2);
    assert!(
        run.stderr()
            .contains("job `build` has no step `lefty` (see `treadle plan` for its steps)"),
        "{}",
        run.stderr()
    );
    assert!(names.is_empty(), "{names:?}");
    let run = f.treadle(&["run", "--force", "--resume", "1"]);
    run.expect_code(2);
    assert!(
        run.stderr().contains("cannot be used with"),
        "{}",
        run.stderr()
    );
}

const AFTER_AGENT: &str = r#"
agents:
  - name: writer
jobs:
  - name: main
    plan:
      - agent: writer
        prompt: Say a number.
      - task: check
        run: exit 3
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_after_a_cached_agent_step_says_how_to_run_it_again() {
    let server = ScriptedServer::start(Script::new(vec![
        Reply::text("seven"),
        Reply::text("eight"),
    ]))
    .await
    .expect("server");
    let url = server.base_url().to_string();
    let f = Fixture::new(AFTER_AGENT);
    let (f, first) = f.run_at(&url).await;
    first.expect_code(1);
    // The run's error, a clause a line under `run N failed in T:` (issue 40: it was one
    // line of ~900 characters).
    let last = |r: &Run| r.stdout().lines().last().unwrap_or_default().to_owned();
    let tail = |r: &Run, n: usize| {
        let out = r.stdout();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    // The job's last lines name the step that failed it; nothing was cached yet.
    let first_tail = tail(&first, 2);
    assert!(
        first_tail.contains(" failed in ")
            && first_tail.ends_with(":\n  step `check` failed: exit code 3"),
        "{}",
        first.stdout()
    );
    let (f, second) = f.run_at(&url).await;
    second.expect_code(1);
    assert!(
        tail(&second, 4).ends_with(
            ":\n  step `check` failed: exit code 3\n  agent step `writer` was taken from the cache \
         (run 1)\n  to run it again: treadle run treadle.yml --rerun writer"
        ),
        "{}",
        second.stdout()
    );
    assert_eq!(
        server.requests().len(),
        1,
        "the second run replayed the agent"
    );
    let url2 = url.clone();
    let third = tokio::task::spawn_blocking(move || {
        f.treadle_env(
            &["run", "--rerun", "writer"],
            &[("TREADLE_LOCAL_URL", &url2)],
        )
    })
    .await
    .expect("treadle");
    third.expect_code(1);
    assert!(third.stdout().contains("eight"), "{}", third.stdout());
    assert_eq!(server.requests().len(), 2, "--rerun asked the model again");
    assert!(!last(&third).contains("--rerun"), "{}", third.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rerun_hint_of_another_file_works_as_printed() {
    // The user's pipeline is `review.yml`; beside it a `treadle.yml` with another job,
    // which a hint without the file would pick.
    let server = ScriptedServer::start(Script::new(vec![
        Reply::text("seven"),
        Reply::text("eight"),
    ]))
    .await
    .expect("server");
    let url = server.base_url().to_string();
    let f =
        Fixture::new("jobs:\n  - name: fix\n    plan:\n      - task: other\n        run: 'true'\n");
    std::fs::write(f.path().join("review.yml"), AFTER_AGENT).expect("write review.yml");
    let run = |f: Fixture, args: Vec<String>| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let run = f.treadle_env(&args, &[("TREADLE_LOCAL_URL", &url)]);
            (f, run)
        })
    };
    let args = || vec!["run".to_owned(), "review.yml".to_owned()];
    let (f, first) = run(f, args()).await.expect("join");
    first.expect_code(1);
    let (f, second) = run(f, args()).await.expect("join");
    second.expect_code(1);
    let out = second.stdout();
    let hint = out
        .lines()
        .last()
        .and_then(|l| l.split("to run it again: treadle ").nth(1))
        .unwrap_or_else(|| panic!("no hint in:\n{out}"))
        .to_owned();
    assert!(hint.contains("review.yml"), "{hint}");
    // Run exactly what was printed, through a shell, as the user would paste it.
    let printed = format!("\"{}\" {hint}", env!("CARGO_BIN_EXE_treadle"));
    let dir = f.path().to_owned();
    let url2 = url.clone();
    let third = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .args(["-c", &printed])
            .current_dir(&dir)
            .env("TREADLE_LOCAL_URL", &url2)
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("sh")
    })
    .await
    .expect("join");
    let said = String::from_utf8_lossy(&third.stdout).into_owned()
        + &String::from_utf8_lossy(&third.stderr);
    assert_eq!(third.status.code(), Some(1), "{said}");
    assert!(
        said.contains("eight"),
        "the hint did not run the step again: {said}"
    );
    assert_eq!(server.requests().len(), 2, "{said}");
    drop(f);
}

#[test]
fn a_job_assert_that_replaces_the_failure_still_names_the_step() {
    let f = Fixture::new(
        r#"
jobs:
  - name: main
    plan:
      - task: ok
        run: echo fine
      - do:
          - task: broken
            run: exit 4
    assert:
      outcome: success
"#,
    );
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    let out = run.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[lines.len().saturating_sub(2)..],
        [
            "  job assert failed: assert outcome: expected success, the job ended in failure",
            "  the plan failed at step `broken`: exit code 4",
        ],
        "{out}"
    );
    let runs = f.treadle(&["runs"]).stdout();
    assert!(runs.contains("the plan failed at step `broken`"), "{runs}");
}

#[test]
fn stdout_says_when_the_text_went_to_stderr_and_output_reads_both() {
    let f = Fixture::new(
        r#"
jobs:
  - name: main
    plan:
      - task: both
        run: 'echo ready; echo "warning: low disk" >&2'
        assert:
          output: low disk
      - task: misdirected
        run: 'echo "warning: low disk" >&2'
        assert:
          stdout: low disk
"#,
    );
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    let out = run.stdout();
    assert!(out.contains("✓ both succeeded"), "{out}");
    // The run's error, a clause a line: the step and its cause, then the hint.
    assert!(
        out.contains(
            "\n  step `misdirected` failed: assert failed: assert stdout: the output does not \
             contain \"low disk\", but stderr does (the command wrote it there)\n  redirect it \
             with `2>&1`"
        ),
        "{out}"
    );
}

#[test]
fn a_confined_task_refused_a_program_outside_names_it_and_confined_false() {
    let Some(_) = treadle::confine::abi() else {
        let why = treadle::confine::unavailable().map_or("no Landlock".into(), |w| w.to_string());
        eprintln!("SKIP: {why}");
        return;
    };
    let tools = tempfile::tempdir().expect("temp dir");
    let tool = tools.path().join("shim");
    std::fs::write(&tool, "#!/bin/sh\necho shimmed\n").expect("write the tool");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let yaml = |confined: bool| {
        format!(
            "jobs:\n  - name: main\n    plan:\n      - task: use-tool\n        confined: {confined}\n        run: {}\n",
            tool.display()
        )
    };
    let f = Fixture::new(&yaml(true));
    let run = f.treadle(&["run"]);
    run.expect_code(1);
    let out = run.stdout();
    assert!(
        out.contains(&format!(
            "  step `use-tool` failed: exit code 126\n  hint: `{}` is outside what the step may reach",
            tool.display()
        )),
        "{out}"
    );
    assert!(out.contains("`confined: false`"), "{out}");
    // The hint's advice works.
    let f = Fixture::new(&yaml(false));
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(run.stdout().contains("shimmed"), "{}", run.stdout());
}

#[test]
fn resume_of_a_forced_run_runs_the_step_it_stopped_in_and_says_what_it_resumes() {
    let f = Fixture::new("");
    let gate = f.path().join("gate");
    let inside = f.path().join("inside");
    let yaml = format!(
        "jobs:\n  - name: j\n    plan:\n      - task: prepare\n        run: echo prepared\n      - task: tests\n        confined: false\n        run: |\n          echo tests ran\n          if [ -f '{}' ]; then touch '{}'; sleep 60; fi\n",
        gate.display(),
        inside.display()
    );
    std::fs::write(f.file(), yaml).expect("write");
    f.treadle(&["run"]).expect_code(0);
    // Run 2, with --force, is stopped (SIGKILL) inside `tests`.
    std::fs::write(&gate, "").expect("gate");
    let mut forced = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(["run", "--force"])
        .current_dir(f.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    crate::common::server::eventually("run 2 inside `tests`", || inside.exists());
    forced.kill().expect("kill");
    forced.wait().expect("wait");
    std::fs::remove_file(&gate).expect("gate");
    let resumed = f.treadle(&["run", "--resume", "2"]);
    resumed.expect_code(0);
    let out = resumed.stdout();
    assert!(
        out.contains("resumes run 2") && out.contains("--force"),
        "the header does not say what it resumes:\n{out}"
    );
    assert!(
        out.contains("tests ran") && !out.contains("from run 1"),
        "the step run 2 stopped in came from run 1's cache:\n{out}"
    );
}
