//! Resource types written as `check`/`in`/`out` scripts, through the `treadle` binary:
//! templating, `version:` (latest, pinned, every across runs), `put`, the built-in `time`
//! type, and each bad input giving an error that names the resource.

use crate::common;

use common::Fixture;

/// A pipeline with one type `counter` whose check reports versions 1..=`count`.
fn counter(count: u32, get: &str) -> String {
    format!(
        r#"
resource_types:
  - name: counter
    config:
      check: |
        i=1; sep=''; printf '['
        while [ $i -le {{{{ .source.count }}}} ]; do printf '%s{{"n": "%s"}}' "$sep" $i; sep=', '; i=$((i+1)); done
        printf ']'
      in: echo {{{{ .version.n | shellquote }}}} > n.txt
resources:
  - name: ticks
    type: counter
    source: {{ count: {count} }}
jobs:
  - name: build
    plan:
{get}
      - task: show
        inputs: [ticks]
        run: echo "took $(cat ticks/n.txt)"
"#
    )
}

fn all(r: &common::Run) -> String {
    format!("{}\n{}", r.stdout(), r.stderr())
}

#[test]
fn a_get_fetches_the_latest_version_or_the_pinned_one() {
    let f = Fixture::new(&counter(3, "      - get: ticks"));
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    assert!(r.stdout().contains("took 3"), "{}", all(&r));

    let pinned = counter(3, "      - get: ticks\n        version: { n: \"2\" }");
    std::fs::write(f.file(), pinned).unwrap();
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    assert!(r.stdout().contains("took 2"), "{}", all(&r));

    let never = counter(3, "      - get: ticks\n        version: { n: \"9\" }");
    std::fs::write(f.file(), never).unwrap();
    let r = f.treadle(&["run"]);
    assert_ne!(r.code(), 0, "{}", all(&r));
    assert!(
        all(&r).contains("resource `ticks` has no version"),
        "{}",
        all(&r)
    );
}

#[test]
fn every_builds_each_version_once_across_runs() {
    let every = "      - get: ticks\n        version: every";
    let f = Fixture::new(&counter(2, every));
    // A run takes every version recorded, oldest first, the plan once per version.
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let out = r.stdout();
    let (one, two) = (out.find("took 1"), out.find("took 2"));
    assert!(one.is_some() && one < two, "{}", all(&r));
    // Two new versions: only those run; then nothing is left and nothing runs.
    std::fs::write(f.file(), counter(4, every)).unwrap();
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let out = r.stdout();
    assert!(
        !out.contains("took 1") && !out.contains("took 2"),
        "{}",
        all(&r)
    );
    assert!(
        out.find("took 3") < out.find("took 4") && out.contains("took 3"),
        "{}",
        all(&r)
    );
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    assert!(!r.stdout().contains("took"), "{}", all(&r));
    assert!(all(&r).contains("no new versions of ticks"), "{}", all(&r));
}

#[test]
fn several_every_gets_advance_in_lockstep_and_hold() {
    let yaml = r#"
resource_types:
  - name: list
    config:
      check: |
        printf '%s' {{ .source.versions | shellquote }}
      in: echo {{ .version.v | shellquote }} > v.txt
resources:
  - name: a
    type: list
    source: { versions: '[{"v": "a1"}, {"v": "a2"}, {"v": "a3"}]' }
  - name: b
    type: list
    source: { versions: '[{"v": "b1"}, {"v": "b2"}]' }
jobs:
  - name: pairs
    plan:
      - get: a
        version: every
      - get: b
        version: every
      - task: show
        inputs: [a, b]
        run: echo "pair $(cat a/v.txt)-$(cat b/v.txt)"
"#;
    let f = Fixture::new(yaml);
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let out = r.stdout();
    let pairs: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split("pair ").nth(1))
        .map(str::trim)
        .collect();
    assert_eq!(pairs, ["a1-b1", "a2-b2", "a3-b2"], "{}", all(&r));
}

#[test]
fn templates_see_source_version_and_params_and_out_prints_a_version() {
    let f = Fixture::new(
        r#"
resource_types:
  - name: notes
    config:
      check: |
        printf '[{"word": "%s"}]' {{ .source.word | upper | shellquote }}
      in: |
        echo {{ .version.word | shellquote }} {{ index .params "extra" | default "none" }} > word.txt
      out: |
        cat notes/text.txt
        printf '{"word": "%s"}' "$(cat notes/text.txt)"
resources:
  - name: note
    type: notes
    source: { word: "it's" }
jobs:
  - name: build
    plan:
      - get: note
        params: { extra: more }
      - task: show
        inputs: [note]
        outputs: [notes]
        run: cat note/word.txt && echo published > notes/text.txt
      - put: note
        inputs: [notes]
"#,
    );
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let out = r.stdout();
    assert!(out.contains("IT'S more"), "{}", all(&r));
    assert!(
        out.contains(r#"put note: version {"word":"published"}"#),
        "{}",
        all(&r)
    );
}

#[test]
fn a_time_resource_has_a_version_stamped_now() {
    let f = Fixture::new(
        r#"
resources:
  - name: tick
    type: time
    source: { interval: 1h }
jobs:
  - name: build
    plan:
      - get: tick
      - task: show
        inputs: [tick]
        run: cat tick/timestamp
"#,
    );
    let r = f.treadle(&["run"]);
    r.expect_code(0);
    let year = r
        .stdout()
        .lines()
        .any(|l| l.contains("20") && l.trim_end().ends_with('Z'));
    assert!(year, "{}", all(&r));
}

/// A pipeline whose type has this `check` and `in`, and a get of it.
fn broken(check: &str, inn: &str, timeout: &str) -> String {
    format!(
        r#"
resource_types:
  - name: flaky
    {timeout}
    config:
      check: |
        {check}
      in: |
        {inn}
resources:
  - name: feed
    type: flaky
    source: {{}}
jobs:
  - name: build
    plan:
      - get: feed
"#
    )
}

fn fails_naming_the_resource(yaml: &str, what: &str) {
    fails_naming_the_resource_with(yaml, &[what]);
}

/// The run fails naming the resource and saying one of `whats`.
fn fails_naming_the_resource_with(yaml: &str, whats: &[&str]) {
    let f = Fixture::new(yaml);
    let r = f.treadle(&["run"]);
    assert_ne!(r.code(), 0, "{}", all(&r));
    let text = all(&r);
    assert!(text.contains("resource `feed`"), "{text}");
    assert!(
        whats.iter().any(|w| text.contains(w)),
        "expected one of {whats:?} in:\n{text}"
    );
}

#[test]
fn a_check_printing_invalid_json_names_the_resource() {
    let yaml = broken("echo 'not json'", "true", "");
    fails_naming_the_resource(&yaml, "is not JSON");
}

#[test]
fn a_check_exiting_non_zero_names_the_resource_and_says_why() {
    let yaml = broken("echo 'api down' >&2; exit 3", "true", "");
    fails_naming_the_resource(&yaml, "exited with code 3: api down");
}

#[test]
fn a_hanging_check_is_killed_at_its_timeout() {
    let yaml = broken("sleep 30", "true", "timeout: 1s");
    let started = std::time::Instant::now();
    fails_naming_the_resource(&yaml, "did not finish within 1s");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn an_in_writing_outside_its_directory_is_an_error() {
    // Beside the artifact: found after the script (and, where the kernel has Landlock,
    // refused while it runs).
    let yaml = broken(r#"printf '[{"v": "1"}]'"#, "echo x > ../escaped.txt", "");
    fails_naming_the_resource_with(&yaml, &["outside its directory", "Permission denied"]);
    // A link in the artifact leading out of it.
    let yaml = broken(r#"printf '[{"v": "1"}]'"#, "ln -s /etc/hostname leak", "");
    fails_naming_the_resource(&yaml, "outside its directory");
}

#[test]
fn a_template_naming_a_missing_key_is_an_error_naming_key_and_resource() {
    let yaml = broken(r#"printf '[{"v": "1"}]'"#, "echo {{ .version.ts }}", "");
    fails_naming_the_resource(&yaml, "`.version.ts` is not set");
}
