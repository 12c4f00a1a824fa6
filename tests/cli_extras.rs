//! `treadle init`, `docs`, `completions` and `man`, run as a user would.

use crate::common;

use common::Fixture;

/// A fixture dir with no pipeline in it.
fn empty() -> Fixture {
    let f = Fixture::new("");
    std::fs::remove_file(f.file()).unwrap();
    f
}

#[test]
fn init_writes_a_pipeline_that_loads_and_refuses_to_overwrite_it() {
    let f = empty();
    let run = f.treadle(&["init"]);
    run.expect_code(0);
    let written = std::fs::read_to_string(f.file()).unwrap();
    assert!(
        written.starts_with("# yaml-language-server: $schema=treadle.schema.json\n"),
        "{written}"
    );
    assert!(written.contains("- agent: helper"), "{written}");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(f.path().join("treadle.schema.json")).unwrap(),
    )
    .expect("the schema is JSON");
    assert!(
        schema.get("$schema").is_some() || schema.get("type").is_some(),
        "{schema}"
    );

    // It loads: `plan` checks the file and lists both steps.
    let plan = f.treadle(&["plan"]);
    plan.expect_code(0);
    assert!(plan.stdout().contains("write-note"), "{}", plan.stdout());
    assert!(plan.stdout().contains("helper"), "{}", plan.stdout());

    // A second init changes nothing.
    std::fs::write(f.file(), "mine\n").unwrap();
    let again = f.treadle(&["init"]);
    again.expect_code(2);
    assert!(
        again.stderr().contains("already exists"),
        "{}",
        again.stderr()
    );
    assert_eq!(std::fs::read_to_string(f.file()).unwrap(), "mine\n");
}

#[test]
fn docs_lists_every_page_and_prints_one() {
    let f = empty();
    let list = f.treadle(&["docs"]);
    list.expect_code(0);
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for entry in std::fs::read_dir(docs).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            assert!(
                list.stdout()
                    .lines()
                    .any(|l| l.trim_start().starts_with(&name)),
                "{name} missing from:\n{}",
                list.stdout()
            );
        }
    }
    let page = f.treadle(&["docs", "pipelines"]);
    page.expect_code(0);
    let source = include_str!("../docs/pipelines.md");
    assert_eq!(page.stdout().trim_end(), source.trim_end());

    let typo = f.treadle(&["docs", "pipelins"]);
    typo.expect_code(2);
    assert!(
        typo.stderr().contains("did you mean `pipelines`"),
        "{}",
        typo.stderr()
    );
}

#[test]
fn completions_cover_the_commands_in_each_shell() {
    let f = empty();
    for (shell, marker) in [
        ("bash", "complete -F _treadle"),
        ("zsh", "#compdef treadle"),
        ("fish", "complete -c treadle"),
    ] {
        let run = f.treadle(&["completions", shell]);
        run.expect_code(0);
        let script = run.stdout();
        assert!(script.contains(marker), "{shell}:\n{script}");
        for command in ["run", "validate", "init", "docs", "approve"] {
            assert!(script.contains(command), "{shell} lacks {command}");
        }
    }
    let bad = f.treadle(&["completions", "cmd.exe"]);
    bad.expect_code(2);
}

#[test]
fn man_page_is_roff_naming_the_commands() {
    let f = empty();
    let run = f.treadle(&["man"]);
    run.expect_code(0);
    let page = run.stdout();
    assert!(page.contains(".TH treadle"), "{page}");
    assert!(page.contains("completions"), "{page}");
    assert!(page.contains("\\-\\-log"), "{page}");
}

#[test]
fn bash_completes_the_names_of_the_docs_pages() {
    let f = empty();
    let script = f.treadle(&["completions", "bash"]).stdout();
    let path = f.path().join("treadle.bash");
    std::fs::write(&path, script).expect("write");
    // Bash itself, completing `treadle docs pip` and `treadle docs ` as a user's Tab would.
    // Bash calls a completion function with the command, the word being completed and
    // the word before it.
    let complete = |words: &str, cword: usize| {
        let line = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; _treadle treadle \"${{COMP_WORDS[{cword}]}}\" \"${{COMP_WORDS[{}]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display(),
            cword - 1
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &line])
            .output()
            .expect("bash");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pip = complete("treadle docs pip", 2);
    assert!(pip.lines().any(|l| l == "pipelines"), "{pip}");
    let all = complete("treadle docs ''", 2);
    for page in ["hooks", "tools", "watch"] {
        assert!(all.lines().any(|l| l == page), "{page} not offered:\n{all}");
    }
}

#[test]
fn man_page_names_no_page_that_does_not_exist() {
    let page = empty().treadle(&["man"]).stdout();
    assert!(!page.contains("(1)"), "names a page per command:\n{page}");
    assert!(page.contains("treadle run"), "{page}");
    assert!(page.contains("treadle docs"), "{page}");
}
