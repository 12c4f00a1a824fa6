//! `treadle runs` as a new user reads it: a file's runs only (two files beside each other
//! share one state file), `--all` with a file column, and the list while `treadle watch`
//! holds the state file.

use crate::common;

use common::Fixture;

const JOB: &str = "jobs:\n  - name: build\n    plan:\n      - task: say\n        run: echo {}\n";

#[test]
fn runs_of_a_file_lists_only_its_runs_and_all_says_which_file() {
    let f = Fixture::new(&JOB.replace("{}", "default"));
    std::fs::write(f.path().join("other.yml"), JOB.replace("{}", "other")).expect("write");
    f.treadle(&["run"]).expect_code(0);
    f.treadle(&["run", "other.yml"]).expect_code(0);
    f.treadle(&["run", "other.yml"]).expect_code(0);
    let ids = |out: &str| -> Vec<String> {
        out.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    let other = f.treadle(&["runs", "other.yml"]);
    other.expect_code(0);
    assert_eq!(ids(&other.stdout()), ["2", "3"], "{}", other.stdout());
    let mine = f.treadle(&["runs"]).stdout();
    assert_eq!(ids(&mine), ["1"], "{mine}");
    let cost = f.treadle(&["runs", "other.yml", "--cost"]).stdout();
    assert_eq!(ids(&cost), ["2", "3"], "{cost}");
    let all = f.treadle(&["runs", "--all"]).stdout();
    assert_eq!(ids(&all), ["1", "2", "3"], "{all}");
    assert!(all.lines().next().unwrap_or("").contains("file"), "{all}");
    assert!(
        all.lines()
            .any(|l| l.starts_with("    3") && l.contains("other.yml")),
        "{all}"
    );
}

#[test]
fn runs_works_while_a_watcher_holds_the_state_file() {
    use common::watch::{Watcher, init_repo, lines, pipeline, wait_for};
    let counts = tempfile::tempdir().expect("dir");
    let f = Fixture::new(&pipeline(counts.path()));
    init_repo(&f.path().join("repo"), "v1");
    let w = Watcher::start(
        &f,
        &["treadle.yml", "--interval", "200ms"],
        &[],
        "watch.log",
    );
    let deployed = counts.path().join("deployed");
    wait_for(
        "v1 deployed",
        std::time::Duration::from_secs(60),
        &w.log,
        || lines(&deployed) == ["v1"],
    );
    // The watcher holds the state file; `runs` reads what it wrote beside it.
    let mut last = String::new();
    common::server::eventually("both builds listed as succeeded", || {
        let runs = f.treadle(&["runs"]);
        last = format!("{}{}", runs.stdout(), runs.stderr());
        runs.code() == 0 && runs.stdout().matches("succeeded").count() == 2
    });
    assert!(last.contains("as the watcher wrote them"), "{last}");
    let steps = f.treadle(&["runs", "--steps", "1"]);
    steps.expect_code(0);
    assert!(steps.stdout().contains("compile"), "{}", steps.stdout());
    f.treadle(&["runs", "--cost"]).expect_code(0);
    drop(w);
}
