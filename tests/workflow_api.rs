//! The workflow API's results, through `treadle::workflow` as a user's program calls it,
//! with real commands and a real state file: a shell step's stdout and stderr apart (the
//! end of each, capped) and a failed command's output kept in its error, also when the
//! step is replayed; artifact handles, and a name the step did not declare as a typed
//! error; a branch whose guard is decided in advance runs no process (the same step with a
//! command guard, where no process can start, errors); a skip's reason in the record, the
//! run's events, `treadle runs --steps` and the API's step.

use std::path::{Path, PathBuf};

use treadle::pipeline::container::Env;
use treadle::pipeline::flow_keys::{Decided, When};
use treadle::pipeline::{At, Step, StepKind};
use treadle::run::Store;
use treadle::workflow::{
    self, Artifact, ArtifactError, Flow, FlowError, Options, Shell, ShellOutput, Workflow,
};

fn state_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".treadle/state.redb")
}

/// Ten lines of 10 000 bytes (9990 `x` and a number): more than the 64 KiB kept of a
/// stream, in few lines (each line is a commit to the run's journal, and a command's
/// output is read for at most a few seconds after it exited).
const BIG: &str = r#"awk 'BEGIN { s = "x"; while (length(s) < 9990) s = s s;
  s = substr(s, 1, 9990); for (i = 1; i <= 10; i++) printf "%s%09d\n", s, i }'"#;

/// What [`Outputs`] saw.
#[derive(Debug)]
struct Seen {
    both: ShellOutput,
    big: ShellOutput,
    failed: ShellOutput,
    failure: String,
}

/// Three shell steps: one printing on both streams, one printing more than the cap, one
/// that fails; the failure is caught, so the run goes on and ends succeeded.
struct Outputs;

impl Workflow for Outputs {
    type Input = ();
    type Output = Seen;
    const NAME: &'static str = "outputs";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<Seen, FlowError> {
        let both = Shell::new("echo out; echo err >&2; echo more");
        let both = flow.shell("both", both).await?;
        let big = flow.shell("big", Shell::new(BIG)).await?;
        let fails = Shell::new("echo partial; echo 'no such file' >&2; exit 3");
        let (failed, failure) = match flow.shell("fails", fails).await {
            Ok(out) => return Err(FlowError::Failed(format!("`fails` succeeded: {out:?}"))),
            Err(e) => match e.output() {
                Some(out) => (out.clone(), e.to_string()),
                None => return Err(FlowError::Failed(format!("no output in `{e}`"))),
            },
        };
        Ok(Seen {
            both,
            big,
            failed,
            failure,
        })
    }
}

fn check(seen: &Seen) {
    let both = &seen.both;
    assert_eq!(both.stdout, "out\nmore\n");
    assert_eq!(both.stderr, "err\n");
    assert!(both.is_success() && !both.truncated, "{both:?}");

    let big = &seen.big;
    assert!(big.truncated, "its 100 kB are cut: {}", big.stdout.len());
    assert!(big.stdout.len() <= 64 * 1024, "{}", big.stdout.len());
    let x = "x".repeat(9990);
    let end = format!("{x}{:09}\n{x}{:09}\n", 9, 10);
    assert!(big.stdout.ends_with(&end), "the end is kept");
    assert!(big.stderr.is_empty());

    let failed = &seen.failed;
    assert_eq!(failed.exit_code, Some(3));
    assert!(!failed.is_success());
    assert_eq!(failed.stdout, "partial\n");
    assert_eq!(failed.stderr, "no such file\n");
    assert!(
        seen.failure.contains("step `fails` failed"),
        "{}",
        seen.failure
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_step_gives_stdout_and_stderr_apart_and_a_failed_ones_output_in_its_error() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let first = workflow::run(&Outputs, (), Options::new(&state))
        .await
        .expect("run");
    assert_eq!(first.exit_code(), 0, "{:?}", first.output);
    check(first.output.as_ref().expect("seen"));

    // Run again: `both` and `big` are replayed from the first run's records, and give
    // back the same streams.
    let second = workflow::run(&Outputs, (), Options::new(&state))
        .await
        .expect("run");
    let seen = second.output.as_ref().expect("seen");
    check(seen);
    let store = Store::open(&state).expect("state");
    let steps = store.steps(second.run).expect("steps");
    let replayed: Vec<&str> = steps
        .iter()
        .filter(|s| s.cached_from == Some(first.run))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(replayed, ["both", "big"]);
}

/// A step that writes `logs/build.log`, then another that makes `logs` again.
struct Build;

impl Workflow for Build {
    type Input = ();
    type Output = (String, String, String);
    const NAME: &'static str = "build";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<(String, String, String), FlowError> {
        let make = Shell::new("echo built > logs/build.log").outputs(["logs"]);
        let build = flow.shell("build", make).await?;
        let logs = build.artifact("logs")?;
        let undeclared = match build.artifact("build.log") {
            Err(e @ ArtifactError::NotDeclared { .. }) => e.to_string(),
            other => return Err(FlowError::Failed(format!("not refused: {other:?}"))),
        };
        // `?` in a workflow makes it the workflow's error, still typed.
        let asked = || -> Result<Artifact, FlowError> { Ok(build.artifact("build.log")?) };
        if !matches!(
            asked(),
            Err(FlowError::Artifact(ArtifactError::NotDeclared { .. }))
        ) {
            return Err(FlowError::Failed("`?` lost the error's type".to_owned()));
        }
        let again = Shell::new("echo rebuilt > logs/build.log").outputs(["logs"]);
        let rebuilt = flow.shell("rebuild", again).await?.artifact("logs")?;
        Ok((
            logs.read_to_string("build.log").await?,
            rebuilt.read_to_string("build.log").await?,
            undeclared,
        ))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steps_artifacts_are_handles_and_an_undeclared_name_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("dir");
    let report = workflow::run(&Build, (), Options::new(state_in(&dir)))
        .await
        .expect("run");
    let (built, rebuilt, undeclared) = report.output.expect("the workflow's output");
    assert_eq!(
        built, "built\n",
        "the handle keeps the directory its step made"
    );
    assert_eq!(rebuilt, "rebuilt\n");
    assert_eq!(
        undeclared,
        "step `build` has no output artifact `build.log` (its outputs: `logs`)"
    );
}

/// A `do: []` step named `name` guarded by `when`, whose commands could start no process
/// (its `PATH` names no directory).
fn guarded(name: &str, when: When) -> Step {
    let mut step = Step::of_kind(StepKind::Do(Vec::new()));
    step.name = Some(At::new(name.to_owned()));
    if let Env::Map(map) = &mut step.env {
        map.insert("PATH".to_owned(), "/nonexistent".to_owned());
    }
    step.when = Some(At::new(when));
    step
}

/// The guards: decided taken, decided skipped with a reason, then a command guard.
struct Guards;

impl Workflow for Guards {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "guards";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let taken = Decided {
            taken: true,
            reason: None,
        };
        flow.step(guarded("taken", When::Decided(taken))).await?;
        let skipped = Decided {
            taken: false,
            reason: Some("retired".to_owned()),
        };
        flow.step(guarded("skipped", When::Decided(skipped)))
            .await?;
        match flow
            .step(guarded("command", When::Shell("true".into())))
            .await
        {
            Err(e) => Ok(e.to_string()),
            Ok(r) => Err(FlowError::Failed(format!("a command ran: {r:?}"))),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decided_guard_starts_no_process() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let report = workflow::run(&Guards, (), Options::new(&state))
        .await
        .expect("run");
    // A guard that is a command needs a process, which cannot start here.
    let error = report.output.expect("the workflow's output");
    assert!(error.contains("the `when:` guard could not run"), "{error}");
    let store = Store::open(&state).expect("state");
    let steps: Vec<String> = store
        .steps(report.run)
        .expect("steps")
        .iter()
        .take(2)
        .map(|s| format!("{} {} {:?}", s.name, s.status.as_str(), s.produced.note))
        .collect();
    assert_eq!(
        steps,
        ["taken succeeded None", "skipped skipped Some(\"retired\")"]
    );
}

/// `flow.when` both ways and `flow.skip` with its reason.
struct Branches;

impl Workflow for Branches {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "branches";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<(), FlowError> {
        flow.when("fast", true).await?;
        flow.when("slow", false).await?;
        flow.skip("legacy", "retired in 2.0").await
    }
}

/// `treadle ARGS --state STATE`.
fn treadle(state: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .expect("run treadle");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skips_reason_is_in_the_record_the_events_the_steps_table_and_the_api() {
    let dir = tempfile::tempdir().expect("dir");
    let state = state_in(&dir);
    let report = workflow::run(&Branches, (), Options::new(&state))
        .await
        .expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    let store = Store::open(&state).expect("state");
    let steps = store.steps(report.run).expect("steps");
    let legacy = steps.iter().find(|s| s.name == "legacy").expect("legacy");
    assert_eq!(legacy.status.as_str(), "skipped");
    assert_eq!(legacy.produced.note.as_deref(), Some("retired in 2.0"));
    let slow = steps.iter().find(|s| s.name == "slow").expect("slow");
    assert_eq!(
        (slow.status.as_str(), &slow.produced.note),
        ("skipped", &None)
    );

    let events =
        treadle::run::event_log::read_after(&store.database(), report.run, 0).expect("events");
    let skipped: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "step_skipped")
        .map(|e| &*e.json)
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[1].contains(r#""reason":"retired in 2.0""#),
        "{skipped:?}"
    );

    let node = treadle::server::views::tree(&steps)
        .into_iter()
        .find(|n| n.name == "legacy")
        .expect("legacy's node");
    let json = serde_json::to_value(&node).expect("json");
    assert_eq!(json["note"], "retired in 2.0");
    drop(store);

    let run = report.run.to_string();
    let table = treadle(&state, &["runs", "--steps", &run]);
    let line = table
        .lines()
        .find(|l| l.contains("legacy"))
        .expect("legacy");
    assert!(line.contains("retired in 2.0"), "{table}");
}
