//! A run checks at start that the programs it needs are on PATH (`sh` for shell commands,
//! `git` for git resources) and says clearly which one is missing, before anything runs.

use crate::common;

use std::path::Path;

use common::Fixture;

/// A PATH on which no program is found: an empty directory.
fn bare_path(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    bin.display().to_string()
}

#[test]
fn a_shell_command_without_sh_on_path_is_refused_before_the_run() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let path = bare_path(f.path());
    let run = f.treadle_env(&["run"], &[("PATH", &path)]);
    run.expect_code(2);
    let stderr = run.stderr();
    assert!(
        stderr.contains("treadle needs `sh` on PATH for the shell command of step `hi`"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: install it"), "{stderr}");
    assert!(!f.path().join(".treadle").exists(), "nothing ran");
}

#[test]
fn a_git_resource_without_git_on_path_is_refused_before_the_run() {
    let yaml = "resources:\n  - name: repo\n    type: git\n    source: { uri: /nonexistent, branch: main }\njobs:\n  - name: j\n    plan:\n      - get: repo\n";
    let f = Fixture::new(yaml);
    let path = bare_path(f.path());
    let run = f.treadle_env(&["test"], &[("PATH", &path)]);
    run.expect_code(2);
    let stderr = run.stderr();
    assert!(
        stderr.contains("treadle needs `git` on PATH for the git resource `repo`"),
        "{stderr}"
    );
}

#[test]
fn with_the_programs_on_path_the_run_goes_ahead() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(!run.stderr().contains("treadle needs"), "{}", run.stderr());
}
