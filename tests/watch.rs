//! `treadle watch` end to end, as a user runs it: the real binary, a real git repository
//! on disk, real processes and signals.
//!
//! * a build job triggered by new commits and a deploy job with `passed: [build]`: each
//!   commit built once and deployed once, in order, counted in files outside the
//!   workspace; the watcher SIGKILLed mid-build and started again: no commit skipped or
//!   built twice;
//! * a check that fails (the repository is not there yet) names the resource and the next
//!   poll still runs;
//! * webhooks: 401 for no token, a wrong one, an unknown resource and an unset variable; a
//!   good delivery checks at once;
//! * `max_consecutive_failures:` pauses a job; `treadle jobs` shows it; `treadle jobs
//!   resume` (handed to the running watcher) builds it again;
//! * SIGTERM: an `interruptible:` build is stopped at once, its process group killed.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::Fixture;
use common::watch::{Watcher, commit, hook_url, init_repo, lines, pipeline, post, wait_for};

#[test]
fn each_commit_is_built_and_deployed_once_in_order_even_across_a_sigkill() {
    let counts = tempfile::tempdir().unwrap();
    let f = Fixture::new(&pipeline(counts.path()));
    let repo = f.path().join("repo");
    init_repo(&repo, "v1");
    let (built, deployed) = (counts.path().join("built"), counts.path().join("deployed"));
    let args = ["treadle.yml", "--interval", "200ms"];
    let mut w = Watcher::start(&f, &args, &[], "watch1.log");
    let limit = Duration::from_secs(60);
    // A fresh state builds the newest version it finds.
    wait_for("v1 deployed", limit, &w.log, || lines(&deployed) == ["v1"]);
    for v in ["v2", "v3"] {
        commit(&repo, v);
        wait_for(&format!("{v} deployed"), limit, &w.log, || {
            lines(&deployed).last().map(String::as_str) == Some(v)
        });
    }
    // Each build is queued under its own number: the second is never "#1" again.
    let said = w.said();
    let queued: Vec<&str> = said
        .lines()
        .filter_map(|l| l.split("queued `").nth(1))
        .filter_map(|rest| rest.split(" with ").next())
        .collect();
    assert!(queued.len() >= 3, "{said}");
    let mut unique = queued.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        queued.len(),
        "a queue number was given twice:\n{said}"
    );
    // SIGKILL mid-build: nothing of the watcher or its build's shell survives to finish it.
    commit(&repo, "v4-slow");
    let started = counts.path().join("started-v4-slow");
    wait_for("v4 build started", limit, &w.log, || started.exists());
    w.signal("-KILL");
    w.wait(Duration::from_secs(10));
    let mut w = Watcher::start(&f, &args, &[], "watch2.log");
    wait_for("v4 deployed after the restart", limit, &w.log, || {
        lines(&deployed).last().map(String::as_str) == Some("v4-slow")
    });
    assert!(w.said().contains("resuming run"), "{}", w.said());
    // Nothing more comes: every commit once, in order.
    std::thread::sleep(Duration::from_millis(800));
    let all = ["v1", "v2", "v3", "v4-slow"];
    assert_eq!(lines(&built), all, "built");
    assert_eq!(lines(&deployed), all, "deployed");
    // SIGTERM: the watcher stops with 128 + 15, and leaves no run `running`.
    w.signal("-TERM");
    assert_eq!(w.wait(Duration::from_secs(30)), Some(143), "{}", w.said());
    let runs = f.treadle(&["runs"]);
    assert!(!runs.stdout().contains("running"), "{}", runs.stdout());
}

#[test]
fn a_failing_check_names_the_resource_and_the_next_poll_still_runs() {
    let counts = tempfile::tempdir().unwrap();
    let f = Fixture::new(&pipeline(counts.path()));
    let w = Watcher::start(&f, &["--interval", "100ms"], &[], "watch.log");
    let limit = Duration::from_secs(30);
    wait_for("two failed checks", limit, &w.log, || {
        w.said().matches("check of `repo` failed").count() >= 2
    });
    assert!(
        w.said().contains("checked again at the next poll"),
        "{}",
        w.said()
    );
    init_repo(&f.path().join("repo"), "v1");
    let deployed = counts.path().join("deployed");
    wait_for("v1 deployed once the repo exists", limit, &w.log, || {
        lines(&deployed) == ["v1"]
    });
}

#[test]
fn a_webhook_with_its_token_checks_at_once_and_nothing_else_gets_in() {
    let counts = tempfile::tempdir().unwrap();
    let yaml = pipeline(counts.path()).replace(
        "    source: { uri: ./repo, branch: main }\n",
        "    source: { uri: ./repo, branch: main }\n    webhook_token_env: REPO_HOOK_TOKEN\n  - name: other\n    type: git\n    source: { uri: ./repo }\n    webhook_token_env: UNSET_HOOK_TOKEN\n",
    );
    let f = Fixture::new(&yaml);
    let repo = f.path().join("repo");
    init_repo(&repo, "v1");
    // An hour between polls: only the first round and the webhook check anything.
    let args = ["--interval", "1h", "--addr", "127.0.0.1:0"];
    let env = [("REPO_HOOK_TOKEN", "s3cret-hook")];
    let w = Watcher::start(&f, &args, &env, "watch.log");
    let base = hook_url(&w);
    let deployed = counts.path().join("deployed");
    let limit = Duration::from_secs(60);
    wait_for("v1 deployed", limit, &w.log, || lines(&deployed) == ["v1"]);
    commit(&repo, "v2");
    let hook = format!("{base}/hooks/check/repo");
    assert_eq!(post(&hook, None), 401, "no token");
    assert_eq!(post(&hook, Some("wrong")), 401, "wrong token");
    assert_eq!(
        post(&format!("{base}/hooks/check/nope"), Some("s3cret-hook")),
        401
    );
    assert_eq!(
        post(&format!("{base}/hooks/check/other"), Some("")),
        401,
        "unset var"
    );
    let get = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &hook])
        .output()
        .unwrap();
    assert_ne!(
        String::from_utf8_lossy(&get.stdout),
        "202",
        "GET must not check"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        lines(&deployed),
        ["v1"],
        "nothing checked without a good token"
    );
    let query = format!("{hook}?token=s3cret-hook");
    assert_eq!(post(&query, None), 202);
    wait_for("v2 deployed after the webhook", limit, &w.log, || {
        lines(&deployed) == ["v1", "v2"]
    });
}

#[test]
fn consecutive_failures_pause_a_job_until_it_is_resumed() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path().display();
    let yaml = format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: ./repo }}
jobs:
  - name: flaky
    max_consecutive_failures: 2
    plan:
      - get: repo
        trigger: true
      - task: try
        inputs: [repo]
        confined: false
        run: |
          echo "$(cat repo/version.txt)" >> "{c}/tried"
          grep -q good repo/version.txt
"#
    );
    let f = Fixture::new(&yaml);
    let repo = f.path().join("repo");
    init_repo(&repo, "bad1");
    let w = Watcher::start(&f, &["--interval", "100ms"], &[], "watch.log");
    let tried = counts.path().join("tried");
    let limit = Duration::from_secs(60);
    wait_for("bad1 tried", limit, &w.log, || lines(&tried) == ["bad1"]);
    commit(&repo, "bad2");
    wait_for("the job paused", limit, &w.log, || {
        w.said().contains("PAUSED")
    });
    assert!(w.said().contains("failed (2/2 in a row)"), "{}", w.said());
    commit(&repo, "good3");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        lines(&tried),
        ["bad1", "bad2"],
        "a paused job builds nothing"
    );
    let jobs = f.treadle(&["jobs"]);
    jobs.expect_code(0);
    assert!(jobs.stdout().contains("paused"), "{}", jobs.stdout());
    let resume = f.treadle(&["jobs", "resume", "flaky"]);
    resume.expect_code(0);
    wait_for("good3 built after the resume", limit, &w.log, || {
        lines(&tried) == ["bad1", "bad2", "good3"]
    });
}

#[test]
fn sigterm_stops_an_interruptible_build_at_once_and_kills_its_process_group() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path().display();
    let yaml = format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: ./repo }}
jobs:
  - name: long
    interruptible: true
    plan:
      - get: repo
        trigger: true
      - task: wait
        confined: false
        run: |
          sleep 300 &
          echo $! > "{c}/child"
          wait
"#
    );
    let f = Fixture::new(&yaml);
    init_repo(&f.path().join("repo"), "v1");
    let mut w = Watcher::start(&f, &["--interval", "100ms"], &[], "watch.log");
    let child = counts.path().join("child");
    wait_for("the build's child", Duration::from_secs(60), &w.log, || {
        lines(&child).len() == 1
    });
    let pid = lines(&child)[0].clone();
    w.signal("-TERM");
    assert_eq!(w.wait(Duration::from_secs(20)), Some(143), "{}", w.said());
    assert!(
        w.said().contains("the next start resumes it"),
        "{}",
        w.said()
    );
    // Gone, or a zombie nobody reaped yet (a container's init may not reap): not running.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
    assert!(
        matches!(state, None | Some('Z' | 'X')),
        "the build's `sleep` outlived the watcher: {stat}"
    );
    // The interrupted run is left for the next start, not `running` forever.
    let runs = f.treadle(&["runs"]);
    assert!(runs.stdout().contains("aborted"), "{}", runs.stdout());
}

#[test]
fn bad_watch_keys_are_load_errors_with_their_place() {
    let cases = [
        (
            "passed: [nobody]",
            "jobs:\n- name: a\n  plan:\n  - get: repo\n    passed: [nobody]\nresources:\n- name: repo\n  type: git\n  source: { uri: ./r }\n",
            "treadle.yml:5:14: `passed` names job `nobody`",
        ),
        (
            "passed on a job that never gets it",
            "jobs:\n- name: a\n  plan:\n  - task: t\n    run: 'true'\n- name: b\n  plan:\n  - get: repo\n    trigger: true\n    passed: [a]\nresources:\n- name: repo\n  type: git\n  source: { uri: ./r }\n",
            "treadle.yml:10:14: `passed: [a]` on the get of `repo`: job `a` never gets or puts `repo`",
        ),
        (
            "a literal token",
            "jobs:\n- name: a\n  plan:\n  - get: repo\nresources:\n- name: repo\n  type: git\n  source: { uri: ./r }\n  webhook_token_env: hunter2-token\n",
            "treadle.yml:9:22: `webhook_token_env` of resource `repo` is not a variable name",
        ),
        (
            "trigger on a task",
            "jobs:\n- name: a\n  plan:\n  - task: t\n    run: 'true'\n    trigger: true\n",
            "treadle.yml:6:14:",
        ),
    ];
    for (what, yaml, expected) in cases {
        let f = Fixture::new(yaml);
        let run = f.treadle(&["validate"]);
        assert_eq!(run.code(), 2, "{what}: {}", run.stderr());
        assert!(run.stderr().contains(expected), "{what}: {}", run.stderr());
        assert!(!run.stderr().contains("hunter2"), "a token is never echoed");
    }
}
