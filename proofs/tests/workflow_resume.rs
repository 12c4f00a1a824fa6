//! workflow-resume (rule 15): a Rust workflow (`treadle::workflow`) run again with the run
//! it was in resumes it like AGL and ironflow: a step the run recorded gives back its
//! result without running, and a step runs again when its kind, its inputs or the work
//! before it changed. The real workflow binary (src/bin/workflow_child.rs), real
//! processes, real SIGKILL; each run of a step appends its number to a counter file.
//!
//! Phase one runs [`STEPS`] steps, killed at [`KILLS`] seeded random points and resumed
//! (from the latest run) each time until a run ends. After each kill the latest run's
//! records are read: a step recorded succeeded there is frozen at the count it has then,
//! and must never be counted again. Phase two changes the configuration of the steps from
//! a seeded `CHANGED` on and resumes the finished run, again under kills: the steps before
//! `CHANGED` must not run again, every step from it on must (the chained key rule), and
//! again none twice once recorded.
//!
//! The binary is a bin of this crate (`treadle-workflow-child`), so `cargo test` builds it
//! from the current sources before the proof runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use treadle_proofs::{pick, rng};

/// The most kills in each phase (a phase ends earlier when a run gets to its end).
const KILLS: usize = 40;
/// Steps of the workflow: each sleeps 50 ms, so a whole run outlasts [`MAX_KILL_MS`] and
/// the first run of a phase is always killed.
const STEPS: u32 = 40;
/// The latest a kill lands after the process started: a few steps' worth, so the kills
/// fall all along the workflow (and some before its run begins).
const MAX_KILL_MS: u64 = 500;

/// The workflow binary: a bin of this crate, so cargo builds it, fresh, with the test.
fn workflow_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_treadle-workflow-child"))
}

/// One phase's world: the binary, the state file, the counter.
struct World {
    bin: PathBuf,
    state: PathBuf,
    counter: PathBuf,
}

/// The latest run: its id, status and the steps recorded succeeded in it.
struct Latest {
    run: u64,
    status: String,
    succeeded: Vec<u32>,
}

impl World {
    /// How often each step ran, by its number.
    fn counts(&self) -> BTreeMap<u32, usize> {
        let text = std::fs::read_to_string(&self.counter).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            let step: u32 = line.parse().expect("a step number");
            *counts.entry(step).or_default() += 1;
        }
        counts
    }

    fn latest(&self) -> Option<Latest> {
        let out = Command::new(&self.bin)
            .arg("records")
            .arg(&self.state)
            .output()
            .expect("records");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("records JSON");
        let run = v["run"].as_u64()?;
        let succeeded = v["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["status"] == "succeeded")
            .map(|s| {
                let name = s["name"].as_str().unwrap_or_default();
                name.trim_start_matches('s').parse().expect("step name sN")
            })
            .collect();
        Some(Latest {
            run,
            status: v["status"].as_str().unwrap_or_default().to_owned(),
            succeeded,
        })
    }

    /// Runs the workflow (resuming `resume`) until it ends or `kill_after` passes.
    fn run(&self, changed: u32, resume: Option<u64>, kill_after: Option<Duration>) -> bool {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run")
            .arg(&self.state)
            .arg(&self.counter)
            .arg(STEPS.to_string())
            .arg(changed.to_string());
        if let Some(run) = resume {
            cmd.arg(run.to_string());
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the workflow");
        if let Some(after) = kill_after {
            std::thread::sleep(after);
            if child.try_wait().expect("poll").is_none() {
                child.kill().expect("SIGKILL");
                child.wait().expect("reap");
                return false;
            }
        }
        let status = child.wait().expect("wait");
        assert!(status.success(), "the workflow failed: {status}");
        true
    }
}

/// Runs one phase: killed `KILLS` times, resumed from the latest run each time, then to
/// its end. `after`: the last run before the phase (its records are not this phase's).
/// Returns the run that ended and how many kills it took. Panics when a step recorded in
/// this phase ran again.
fn phase(world: &World, changed: u32, after: Option<u64>, seed: u64) -> (u64, usize) {
    let mut rng = rng(seed);
    let mut frozen: BTreeMap<u32, usize> = BTreeMap::new();
    let mut resume = after;
    let mut kills = 0;
    loop {
        let kill = (kills < KILLS).then(|| Duration::from_millis(pick(&mut rng, 0..MAX_KILL_MS)));
        let ended = world.run(changed, resume, kill);
        kills += usize::from(!ended);
        let counts = world.counts();
        let latest = world.latest().filter(|l| after.is_none_or(|a| l.run > a));
        if let Some(latest) = &latest {
            for step in &latest.succeeded {
                let now = counts.get(step).copied().unwrap_or(0);
                let was = *frozen.entry(*step).or_insert(now);
                assert_eq!(
                    now, was,
                    "seed {seed}: step s{step}, recorded with {was} run(s), ran again (kill {kills}, run {})",
                    latest.run
                );
            }
            resume = Some(latest.run);
        }
        if ended {
            let latest = latest.expect("a run that ended is recorded");
            assert_eq!(latest.status, "succeeded");
            assert_eq!(
                latest.succeeded.len(),
                STEPS as usize,
                "every step recorded"
            );
            for (step, was) in &frozen {
                assert_eq!(
                    counts.get(step),
                    Some(was),
                    "seed {seed}: s{step} ran after its record"
                );
            }
            assert!(kills >= 1, "the first run outlasts every kill time");
            return (latest.run, kills);
        }
    }
}

#[test]
fn a_killed_workflow_resumed_never_reruns_a_recorded_step_nor_skips_a_changed_one() {
    let bin = workflow_binary();
    let dir = tempfile::tempdir().expect("dir");
    let world = World {
        bin,
        state: dir.path().join(".treadle").join("state.redb"),
        counter: dir.path().join("counter"),
    };
    let seed = 15;
    let (first, kills_one) = phase(&world, STEPS, None, seed);
    let before = world.counts();
    assert!(
        (0..STEPS).all(|s| before.get(&s).is_some_and(|n| *n >= 1)),
        "{before:?}"
    );

    let changed = u32::try_from(pick(&mut rng(seed + 1), 1..u64::from(STEPS))).expect("small");
    let (_, kills_two) = phase(&world, changed, Some(first), seed + 2);
    let after = world.counts();
    for step in 0..STEPS {
        let (was, now) = (before[&step], after[&step]);
        if step < changed {
            assert_eq!(
                now, was,
                "s{step} is before the change (s{changed}): it must not run again"
            );
        } else {
            assert!(
                now > was,
                "s{step} is at or after the change (s{changed}): it must run again"
            );
        }
    }
    let reruns: usize = before.values().sum::<usize>() - STEPS as usize;
    println!(
        "{kills_one} + {kills_two} kills; {reruns} step run(s) a kill caught in flight ran again in phase one; changed from s{changed}"
    );
}

/// How long the killed run of [`a_killed_workflow_run_again_with_resume_last_goes_on`] may
/// take to count the steps it waits for before it is killed.
const COUNT_WAIT: Duration = Duration::from_secs(60);

/// Starts the counter workflow with `resume_last()` (`last`) and gives back the child.
fn start_last(world: &World) -> std::process::Child {
    Command::new(&world.bin)
        .arg("run")
        .arg(&world.state)
        .arg(&world.counter)
        .arg(STEPS.to_string())
        .arg(STEPS.to_string())
        .arg("last")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the workflow")
}

/// Runs the workflow with `resume_last()` to its end; gives back the run it said it
/// resumed (its last line, after the transcript).
fn run_last_to_end(world: &World) -> Option<u64> {
    let out = start_last(world).wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "the workflow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    said.lines()
        .filter_map(|l| l.strip_prefix("resumed "))
        .map(|run| run.parse().expect("a run number"))
        .next_back()
}

/// The program is told no run number: `Options::resume_last()` finds the run it was killed
/// in (the newest of its workflow in the state file, unfinished), resumes it, and the
/// steps that run recorded do not run again; once a run of it ended, the next starts
/// fresh.
#[test]
fn a_killed_workflow_run_again_with_resume_last_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let world = World {
        bin: workflow_binary(),
        state: dir.path().join(".treadle").join("state.redb"),
        counter: dir.path().join("counter"),
    };
    // The first run is killed once it has counted a few steps (each step counts itself
    // before it is recorded, so some are recorded and one may be in flight).
    let mut child = start_last(&world);
    let started = std::time::Instant::now();
    while world.counts().len() < 5 {
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the workflow ended before it was killed"
        );
        assert!(started.elapsed() < COUNT_WAIT, "no step counted in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let killed = world.latest().expect("the killed run is recorded");
    assert_eq!(killed.status, "running", "killed mid-run");
    assert!(!killed.succeeded.is_empty(), "some steps were recorded");
    let frozen = world.counts();

    assert_eq!(run_last_to_end(&world), Some(killed.run), "told no number");
    let after = world.latest().expect("the resumed run");
    assert!(after.run > killed.run);
    assert_eq!(after.status, "succeeded");
    assert_eq!(after.succeeded.len(), STEPS as usize, "every step recorded");
    let counts = world.counts();
    for step in &killed.succeeded {
        assert_eq!(
            counts.get(step),
            frozen.get(step),
            "s{step}, recorded before the kill, ran again: the run was not resumed"
        );
    }
    assert!(
        (0..STEPS).all(|s| counts.get(&s).is_some_and(|n| *n >= 1)),
        "{counts:?}"
    );
    let store = treadle::run::Store::open(&world.state).expect("state");
    let old = store.run(killed.run).expect("the killed run");
    assert_eq!(old.status, treadle::run::RunStatus::Aborted, "{old:?}");
    drop(store);

    // The newest run ended: nothing is left to resume, the next run is fresh and its
    // (volatile) steps all run again.
    assert_eq!(
        run_last_to_end(&world),
        None,
        "a finished run is not resumed"
    );
    let fresh = world.latest().expect("the fresh run");
    assert_eq!(fresh.status, "succeeded");
    let again = world.counts();
    for step in 0..STEPS {
        assert_eq!(again[&step], counts[&step] + 1, "s{step} ran once more");
    }
}
