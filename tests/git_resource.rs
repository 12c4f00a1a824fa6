//! The built-in git resource through the `treadle` binary, against real repositories made
//! with git in a temp dir: get (cached by commit), put, and the bad inputs.

use crate::common;

use common::{Fixture, git, git_remote};

fn pipeline(uri: &str, branch: &str) -> String {
    format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: "{uri}", branch: {branch} }}
jobs:
  - name: build
    plan:
      - task: prepare
        run: echo preparing
      - get: repo
      - task: compile
        inputs: [repo]
        outputs: [dist]
        run: tr a-z A-Z < repo/words.txt > dist/WORDS.txt
      - task: show
        inputs: [dist]
        run: cat dist/WORDS.txt
      - put: repo
        inputs: [dist]
        params: {{ repository: dist, message: "built" }}
"#
    )
}

#[test]
fn get_is_cached_by_commit_and_put_pushes_a_commit() {
    let f = Fixture::new("plan: []\n");
    let (bare, work) = git_remote(f.path());
    let uri = format!("file://{}", bare.display());
    std::fs::write(f.file(), pipeline(&uri, "published")).unwrap();
    // `put` targets its own branch so that `get` of main sees the same commit.
    let yaml = pipeline(&uri, "main").replace("      - put: repo\n", "      - put: out\n");
    let yaml = yaml.replace(
        "jobs:",
        &format!(
            "  - name: out\n    type: git\n    source: {{ uri: \"{uri}\", branch: published }}\njobs:"
        ),
    );
    std::fs::write(f.file(), yaml).unwrap();
    let first = f.treadle(&["run"]);
    first.expect_code(0);
    assert!(first.stdout().contains("ALPHA"), "{}", first.stdout());
    let published = git(&bare, &["show", "published:WORDS.txt"]);
    assert_eq!(published, "ALPHA");

    let second = f.treadle(&["run"]);
    second.expect_code(0);
    let out = second.stdout();
    for step in ["prepare", "repo", "compile", "show"] {
        assert!(
            out.contains(&format!("↺ {step} [")),
            "{step} cached:\n{out}"
        );
    }
    assert!(out.contains("▶ out [put]"), "a put always runs:\n{out}");

    // A new commit: the get and everything after it run; `prepare` stays cached.
    std::fs::write(work.join("words.txt"), "beta\n").unwrap();
    git(&work, &["commit", "--quiet", "-am", "second"]);
    git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
    let third = f.treadle(&["run"]);
    third.expect_code(0);
    let out = third.stdout();
    assert!(out.contains("↺ prepare ["), "{out}");
    assert!(
        out.contains("▶ repo [get]") && out.contains("▶ compile [task]"),
        "{out}"
    );
    assert!(out.contains("BETA"), "{out}");
    assert_eq!(git(&bare, &["show", "published:WORDS.txt"]), "BETA");
    // One commit per put: a put runs in every run, cached or not.
    assert_eq!(git(&bare, &["rev-list", "--count", "published"]), "3");
}

#[test]
fn an_unreachable_uri_is_a_clear_error() {
    let f = Fixture::new(&pipeline("/nonexistent/nowhere.git", "main"));
    let r = f.treadle(&["run"]);
    r.expect_code(2);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(
        all.contains("cannot reach git repository `/nonexistent/nowhere.git`"),
        "{all}"
    );
}

#[test]
fn a_missing_branch_is_a_clear_error() {
    let f = Fixture::new("plan: []\n");
    let (bare, _) = git_remote(f.path());
    std::fs::write(f.file(), pipeline(bare.to_str().unwrap(), "nope")).unwrap();
    let r = f.treadle(&["run"]);
    r.expect_code(2);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(all.contains("has no branch `nope`"), "{all}");
}

#[test]
fn a_relative_uri_is_taken_from_the_pipeline_directory() {
    let f = Fixture::new("plan: []\n");
    let sub = f.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    git_remote(&sub);
    let yaml = r#"
resources:
  - name: repo
    type: git
    source: { uri: remote.git, branch: main }
plan:
  - get: repo
  - task: show
    inputs: [repo]
    run: cat repo/words.txt
"#;
    std::fs::write(sub.join("treadle.yml"), yaml).unwrap();
    // A relative pipeline path from the directory above, then from the pipeline's own.
    let r = f.treadle(&["run", "sub/treadle.yml"]);
    r.expect_code(0);
    assert!(r.stdout().contains("alpha"), "{}", r.stdout());
    let r = f.treadle(&["plan", "sub/treadle.yml"]);
    r.expect_code(0);
    assert!(r.stdout().contains("repo"), "{}{}", r.stdout(), r.stderr());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(["run", "--resume", "1"])
        .current_dir(&sub)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
