//! A put's version is recorded in its resource's version history: a get in a later run
//! fetches it, while a get later in the same run still fetches what the check reported
//! (the plan is fixed before its steps change anything); under `treadle watch` a job
//! triggered on the resource builds it, and a `passed: [job]` get takes the version that
//! job put.

use crate::common;

use std::time::Duration;

use common::Fixture;
use common::watch::{Watcher, commit, init_repo, lines, wait_for};

const RELEASE: &str = r#"
resource_types:
  - name: release
    config:
      check: |
        printf '[{"ref": "v1.4.1"}]'
      in: echo {{ .version.ref | shellquote }} > ref
      out: |
        printf '{"ref": "v1.4.2"}'
resources:
  - { name: releases, type: release, source: {} }
jobs:
  - name: publish
    plan:
      - put: releases
      - get: releases
      - task: verify
        inputs: [releases]
        run: cat releases/ref
  - name: consume
    plan:
      - get: releases
      - task: show
        inputs: [releases]
        run: cat releases/ref
"#;

#[test]
fn a_later_run_gets_what_a_put_published_and_the_same_run_does_not() {
    let f = Fixture::new(RELEASE);
    // The check's version first: a version recorded later counts as newer.
    let consume = f.treadle(&["run", "--job", "consume"]);
    consume.expect_code(0);
    assert!(
        consume
            .stdout()
            .contains(r#"fetched releases at {"ref":"v1.4.1"}"#)
    );
    let publish = f.treadle(&["run", "--job", "publish"]);
    publish.expect_code(0);
    let out = publish.stdout();
    assert!(
        out.contains(r#"put releases: version {"ref":"v1.4.2"}"#),
        "{out}"
    );
    assert!(out.contains("v1.4.1"), "the same run's get: {out}");
    assert!(
        !out.contains("fetched releases at {\"ref\":\"v1.4.2\"}"),
        "{out}"
    );
    let consume = f.treadle(&["run", "--job", "consume"]);
    consume.expect_code(0);
    let out = consume.stdout();
    assert!(
        out.contains(r#"fetched releases at {"ref":"v1.4.2"}"#),
        "a later run fetches the put's version: {out}"
    );
}

#[test]
fn under_watch_a_put_triggers_its_downstream_jobs_and_passes_with_its_build() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path().display();
    // `pkg`'s check finds nothing: its only versions are the ones `build` puts.
    let yaml = format!(
        r#"
resource_types:
  - name: box
    config:
      check: printf '[]'
      in: echo {{{{ .version.v | shellquote }}}} > v.txt
      out: |
        printf '{{"v": "%s"}}' "$(cat repo/version.txt)"
resources:
  - {{ name: repo, type: git, source: {{ uri: ./repo, branch: main }} }}
  - {{ name: pkg, type: box, source: {{}} }}
jobs:
  - name: build
    plan:
      - get: repo
        trigger: true
      - put: pkg
        inputs: [repo]
  - name: deploy
    plan:
      - get: pkg
        trigger: true
        passed: [build]
      - task: ship
        inputs: [pkg]
        confined: false
        run: cat pkg/v.txt >> "{c}/deployed"
  - name: notify
    plan:
      - get: pkg
        trigger: true
      - task: tell
        inputs: [pkg]
        confined: false
        run: cat pkg/v.txt >> "{c}/notified"
"#
    );
    let f = Fixture::new(&yaml);
    init_repo(&f.path().join("repo"), "v1");
    let w = Watcher::start(&f, &["--interval", "200ms"], &[], "watch.log");
    let limit = Duration::from_secs(60);
    let (deployed, notified) = (
        counts.path().join("deployed"),
        counts.path().join("notified"),
    );
    wait_for("v1 deployed and notified", limit, &w.log, || {
        lines(&deployed) == ["v1"] && lines(&notified) == ["v1"]
    });
    commit(&f.path().join("repo"), "v2");
    wait_for("v2 deployed and notified", limit, &w.log, || {
        lines(&deployed) == ["v1", "v2"] && lines(&notified) == ["v1", "v2"]
    });
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(lines(&deployed), ["v1", "v2"], "{}", w.said());
    assert_eq!(lines(&notified), ["v1", "v2"], "{}", w.said());
}

#[test]
fn passed_may_name_a_job_that_puts_the_resource() {
    let yaml = RELEASE.replace(
        "  - name: consume\n    plan:\n      - get: releases\n",
        "  - name: consume\n    plan:\n      - get: releases\n        passed: [publish]\n",
    );
    let f = Fixture::new(&yaml);
    f.treadle(&["validate"]).expect_code(0);
}
