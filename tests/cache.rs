//! The step cache through the `treadle` binary: replay of unchanged steps, exactly the
//! downstream steps re-running after a change, `plan`, a corrupt entry, resume after
//! SIGKILL, replay from a step, and the bad inputs of resume.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Fixture, example};

/// Names of the steps the transcript shows as replayed, and as started.
fn cached_and_started(out: &str) -> (Vec<String>, Vec<String>) {
    let name = |l: &str, mark: &str| {
        l.trim_start()
            .strip_prefix(mark)
            .and_then(|r| r.split(" [").next())
            .map(str::to_owned)
    };
    let cached = out.lines().filter_map(|l| name(l, "↺ ")).collect();
    let started = out
        .lines()
        .filter(|l| l.contains("[task]") || l.contains("[get]"))
        .filter_map(|l| name(l, "▶ "))
        .collect();
    (cached, started)
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
fn build_twice_second_run_executes_no_step() {
    let f = Fixture::new(&example("build.yml"));
    f.treadle(&["run"]).expect_code(0);
    let second = f.treadle(&["run"]);
    second.expect_code(0);
    let out = second.stdout();
    let (mut cached, started) = cached_and_started(&out);
    assert!(
        started.is_empty(),
        "no step may run again: {started:?}\n{out}"
    );
    // The two checks run in parallel: either may be shown first.
    cached.sort();
    assert_eq!(
        cached,
        [
            "check-sorted",
            "check-upper",
            "compile",
            "publish",
            "write-source"
        ],
        "{out}"
    );
    // The recorded output is shown again.
    assert!(out.contains("GAMMA") && out.contains("upper ok"), "{out}");
}

const DOWNSTREAM: &str = r#"
jobs:
  - name: build
    plan:
      - task: prepare
        outputs: [tools]
        # Test bookkeeping in files outside the step directory: not confined.
        pass_env: [COUNT]
        confined: false
        run: echo tool > tools/t.txt; echo prepare >> "$COUNT"
      - task: read-source
        volatile: true
        outputs: [source]
        # Test bookkeeping in files outside the step directory: not confined.
        pass_env: [SRC]
        confined: false
        run: cp "$SRC"/* source/
      - task: compile
        inputs: [source]
        outputs: [dist]
        # Test bookkeeping in files outside the step directory: not confined.
        pass_env: [COUNT]
        confined: false
        run: tr a-z A-Z < source/words.txt > dist/WORDS.txt; echo compile >> "$COUNT"
      - task: publish
        inputs: [dist]
        # Test bookkeeping in files outside the step directory: not confined.
        pass_env: [COUNT]
        confined: false
        run: cat dist/WORDS.txt; echo publish >> "$COUNT"
"#;

#[test]
fn changing_one_input_file_reruns_exactly_the_steps_downstream() {
    let f = Fixture::new(DOWNSTREAM);
    let src = f.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("words.txt"), "alpha\n").unwrap();
    let count = f.path().join("count.txt");
    let env = [
        ("SRC", src.to_str().unwrap()),
        ("COUNT", count.to_str().unwrap()),
    ];
    f.treadle_env(&["run"], &env).expect_code(0);
    assert_eq!(lines(&count), 3);

    let same = f.treadle_env(&["run"], &env);
    same.expect_code(0);
    let (cached, started) = cached_and_started(&same.stdout());
    assert_eq!(
        cached,
        ["prepare", "compile", "publish"],
        "{}",
        same.stdout()
    );
    assert_eq!(started, ["read-source"], "volatile steps always run");
    assert_eq!(lines(&count), 3);

    std::fs::write(src.join("words.txt"), "beta\n").unwrap();
    let plan = f.treadle_env(&["plan"], &env);
    plan.expect_code(0);
    let p = plan.stdout();
    assert!(p.contains("prepare [task] cached"), "{p}");
    assert!(p.contains("read-source [task] would run: volatile"), "{p}");
    // The plan cannot know what a volatile step will read: it says what decides.
    assert!(
        p.contains(
            "compile [task] cached (from run 1) if input `source` comes out as in run 1; otherwise would run: input `source` is remade"
        ),
        "{p}"
    );

    let changed = f.treadle_env(&["run"], &env);
    changed.expect_code(0);
    let (cached, started) = cached_and_started(&changed.stdout());
    assert_eq!(cached, ["prepare"], "{}", changed.stdout());
    assert_eq!(started, ["read-source", "compile", "publish"]);
    assert!(changed.stdout().contains("BETA"));
    assert_eq!(lines(&count), 5);
}

#[test]
fn plan_names_the_part_of_the_key_that_changed() {
    let f = Fixture::new(&example("build.yml"));
    let before = f.treadle(&["plan"]);
    before.expect_code(0);
    assert!(
        before
            .stdout()
            .contains("write-source [task] would run: never ran")
    );
    f.treadle(&["run"]).expect_code(0);
    let all = f.treadle(&["plan"]);
    assert!(
        all.stdout().matches("cached (from run 1)").count() == 5,
        "{}",
        all.stdout()
    );
    let edited = example("build.yml").replace("sort -r", "sort -r -s");
    std::fs::write(f.file(), edited).unwrap();
    let plan = f.treadle(&["plan"]);
    let p = plan.stdout();
    assert!(p.contains("write-source [task] cached"), "{p}");
    assert!(
        p.contains("compile [task] would run: configuration changed"),
        "{p}"
    );
    assert!(p.contains("publish [task] would run:"), "{p}");
}

#[test]
fn corrupted_cache_entry_is_detected_and_the_step_runs_again() {
    let yaml = r#"
plan:
  - task: make
    outputs: [out]
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: echo payload > out/data.txt; echo run >> "$COUNT"
  - task: use
    inputs: [out]
    run: cat out/data.txt
"#;
    let f = Fixture::new(yaml);
    let count = f.path().join("count.txt");
    let env = [("COUNT", count.to_str().unwrap())];
    f.treadle_env(&["run"], &env).expect_code(0);
    let objects = f.path().join(".treadle/cas/objects");
    let mut corrupted = 0;
    for dir in std::fs::read_dir(&objects).unwrap().flatten() {
        for obj in std::fs::read_dir(dir.path()).unwrap().flatten() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(obj.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::write(obj.path(), "tampered\n").unwrap();
            corrupted += 1;
        }
    }
    assert!(corrupted > 0);
    let again = f.treadle_env(&["run"], &env);
    again.expect_code(0);
    assert!(
        again.stderr().contains("running it again"),
        "{}",
        again.stderr()
    );
    assert_eq!(lines(&count), 2, "the corrupt step ran again");
    assert!(again.stdout().contains("payload"), "{}", again.stdout());
    // The re-run stored a good entry: the third run replays.
    let third = f.treadle_env(&["run"], &env);
    third.expect_code(0);
    assert_eq!(lines(&count), 2);
}

const SLOW: &str = r#"
plan:
  - task: one
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: echo one >> "$COUNT"
  - task: two
    volatile: true
    outputs: [o]
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: echo two >> "$COUNT"; echo made > o/file
  - task: three
    inputs: [o]
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [MARK]
    confined: false
    run: test -f "$MARK" || { touch "$MARK"; sleep 30; }
  - task: four
    run: echo four
"#;

#[test]
fn sigkill_mid_run_then_resume_skips_succeeded_steps() {
    let f = Fixture::new(SLOW);
    let count = f.path().join("count.txt");
    let mark = f.path().join("mark");
    let mut child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env("COUNT", &count)
        .env("MARK", &mark)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !mark.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "step three never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: no chance to record anything more.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(lines(&count), 2);

    let env = [
        ("COUNT", count.to_str().unwrap()),
        ("MARK", mark.to_str().unwrap()),
    ];
    let resumed = f.treadle_env(&["run", "--resume", "1"], &env);
    resumed.expect_code(0);
    let (cached, started) = cached_and_started(&resumed.stdout());
    assert_eq!(cached, ["one", "two"], "{}", resumed.stdout());
    assert_eq!(started, ["three", "four"]);
    assert_eq!(lines(&count), 2, "steps one and two did not run again");
    let runs = f.treadle(&["runs"]);
    assert!(
        runs.stdout().contains("resumed as run 2"),
        "{}",
        runs.stdout()
    );
}

#[test]
fn replay_from_a_step_reruns_it_and_what_follows() {
    let f = Fixture::new(&example("build.yml"));
    f.treadle(&["run"]).expect_code(0);
    let r = f.treadle(&["run", "--replay", "1", "--from", "compile"]);
    r.expect_code(0);
    let (cached, mut started) = cached_and_started(&r.stdout());
    assert_eq!(cached, ["write-source"], "{}", r.stdout());
    started.sort();
    assert_eq!(
        started,
        ["check-sorted", "check-upper", "compile", "publish"]
    );
    let bad = f.treadle(&["run", "--replay", "1", "--from", "nope"]);
    bad.expect_code(2);
    assert!(
        bad.stderr().contains("has no step `nope`"),
        "{}",
        bad.stderr()
    );
}

#[test]
fn resume_of_an_unknown_run_is_a_clear_error() {
    let f = Fixture::new(&example("hello.yml"));
    f.treadle(&["run"]).expect_code(0);
    let r = f.treadle(&["run", "--resume", "99"]);
    r.expect_code(2);
    assert!(r.stderr().contains("there is no run 99"), "{}", r.stderr());
    // Nothing was recorded for it.
    let runs = f.treadle(&["runs"]);
    assert_eq!(runs.stdout().lines().count(), 2, "{}", runs.stdout());
}

#[test]
fn the_store_keeps_under_its_size_limit_dropping_least_recently_used() {
    let yaml = r#"
cache: { max_size: 100 }
plan:
  - task: a
    outputs: [o]
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: head -c 80 /dev/zero | tr '\0' a > o/a; echo a >> "$COUNT"
  - task: b
    outputs: [p]
    # Test bookkeeping in files outside the step directory: not confined.
    pass_env: [COUNT]
    confined: false
    run: head -c 80 /dev/zero | tr '\0' b > p/b; echo b >> "$COUNT"
"#;
    let f = Fixture::new(yaml);
    let count = f.path().join("count.txt");
    let env = [("COUNT", count.to_str().unwrap())];
    let size = |f: &Fixture| -> u64 {
        let objects = f.path().join(".treadle/cas/objects");
        std::fs::read_dir(objects)
            .unwrap()
            .flatten()
            .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
            .map(|o| o.metadata().unwrap().len())
            .sum()
    };
    f.treadle_env(&["run"], &env).expect_code(0);
    assert!(size(&f) <= 100, "{} bytes kept", size(&f));
    f.treadle_env(&["run"], &env).expect_code(0);
    // One of the two entries was evicted, so exactly one step ran again.
    assert_eq!(lines(&count), 3);
    assert!(size(&f) <= 100);
}

#[test]
fn identical_parallel_branches_do_not_replay_each_other() {
    let yaml = r#"
plan:
  - in_parallel:
      limit: 1
      steps:
        - task: a
          # Test bookkeeping in files outside the step directory: not confined.
          pass_env: [COUNT]
          confined: false
          run: echo x >> "$COUNT"
        - task: b
          # Test bookkeeping in files outside the step directory: not confined.
          pass_env: [COUNT]
          confined: false
          run: echo x >> "$COUNT"
"#;
    let f = Fixture::new(yaml);
    let count = f.path().join("count.txt");
    let env = [("COUNT", count.to_str().unwrap())];
    f.treadle_env(&["run"], &env).expect_code(0);
    assert_eq!(lines(&count), 2, "both branches ran");
    let again = f.treadle_env(&["run"], &env);
    again.expect_code(0);
    assert_eq!(lines(&count), 2, "and both are replayed next time");
    assert_eq!(cached_and_started(&again.stdout()).0, ["a", "b"]);
}
