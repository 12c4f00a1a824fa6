//! `treadle watch` over checks that go wrong, with `resource_types:` scripts: a check that
//! prints something that is not a JSON list, one that exits non-zero, one that hangs past
//! its type's `timeout:`, one whose template names a missing key. Each poll reports each
//! of them with the resource's name and what went wrong; the next poll checks them again;
//! a good resource beside them is built as usual.

use crate::common;

use std::time::Duration;

use common::Fixture;
use common::watch::{Watcher, lines, wait_for};

#[test]
fn bad_checks_are_reported_by_name_and_polled_again_while_a_good_one_builds() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path().display();
    let job = |r: &str| {
        format!(
            "  - name: on-{r}\n    plan:\n      - get: {r}\n        trigger: true\n      - task: count\n        inputs: [{r}]\n        confined: false\n        run: cat {r}/v.txt >> \"{c}/built-{r}\"\n"
        )
    };
    let mut yaml = String::from(
        r#"resource_types:
  - name: badjson
    config:
      check: printf 'not json at all'
      in: echo x > v.txt
  - name: fails
    config:
      check: echo "the server said no" >&2; exit 3
      in: echo x > v.txt
  - name: hangs
    timeout: 300ms
    config:
      check: sleep 30
      in: echo x > v.txt
  - name: missing
    config:
      check: |
        printf '[{"v": "%s"}]' {{ .source.nope | shellquote }}
      in: echo x > v.txt
  - name: good
    config:
      check: |
        printf '[{"v": "1"}, {"v": "2"}]'
      in: echo {{ .version.v | shellquote }} > v.txt
resources:
  - { name: badjson, type: badjson, source: {} }
  - { name: fails, type: fails, source: {} }
  - { name: hangs, type: hangs, source: {} }
  - { name: missing, type: missing, source: {} }
  - { name: good, type: good, source: {} }
jobs:
"#,
    );
    for r in ["badjson", "fails", "hangs", "missing", "good"] {
        yaml.push_str(&job(r));
    }
    let f = Fixture::new(&yaml);
    let w = Watcher::start(&f, &["--interval", "200ms"], &[], "watch.log");
    let limit = Duration::from_secs(60);
    wait_for("two polls of every bad check", limit, &w.log, || {
        let said = w.said();
        ["badjson", "fails", "hangs", "missing"]
            .iter()
            .all(|r| said.matches(&format!("check of `{r}` failed")).count() >= 2)
    });
    // The cold start builds the newest version of the good one, once.
    wait_for("the good resource built", limit, &w.log, || {
        lines(&counts.path().join("built-good")) == ["2"]
    });
    let said = w.said();
    for (resource, why) in [
        ("badjson", "JSON"),
        ("fails", "the server said no"),
        ("hangs", "300ms"),
        ("missing", "nope"),
    ] {
        let line = said
            .lines()
            .find(|l| l.contains(&format!("check of `{resource}` failed")))
            .unwrap_or_default();
        assert!(
            line.contains(why),
            "{resource}: expected `{why}` in: {line}"
        );
    }
    for r in ["badjson", "fails", "hangs", "missing"] {
        assert!(
            !counts.path().join(format!("built-{r}")).exists(),
            "{r} built"
        );
    }
}
