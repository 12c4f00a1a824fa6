//! Fuzzing the pipeline loader with proptest (stable Rust): whatever the text, loading
//! never panics and ends in a pipeline or in errors that each name the file, say what is
//! wrong and how to fix it, and give a line and column whenever the parser knows one.
//!
//! Three generators: arbitrary text; a valid pipeline with random edits (characters and
//! YAML tokens inserted, ranges deleted, lines swapped), which reaches the checks; and
//! pipelines assembled from the format's own keys and values in random shapes.
//! `scripts/fuzz` runs the same targets with many more cases (`PROPTEST_CASES`).

use std::path::Path;

use proptest::prelude::*;
use treadle::pipeline::{self, CheckScope, Problem};

const VALID: &str = r#"resources:
  - name: repo
    type: git
    source: { uri: remote.git, branch: main }
agents:
  - name: writer
    tools: [write_file, run_shell]
    budget: { tokens: 1000 }
jobs:
  - name: build
    budget: { tokens: 5000 }
    plan:
      - get: repo
      - task: compile
        inputs: [repo]
        outputs: [dist]
        attempts: 2
        max_visits: 3
        timeout: 30s
        env: { A: b }
        run: make
      - in_parallel:
          steps:
            - task: a
              run: echo a
            - agent: writer
              prompt: write it
              verdicts: [{ ok: next }, { redo: compile }]
      - approval: ship
        message: Ship?
        timeout: 1m
        on_timeout: reject
      - try:
          task: maybe
          run: exit 1
    ensure:
      task: cleanup
      run: true
"#;

/// Tokens that stress YAML and the format: indicators, anchors, tags, tabs, the format's
/// keys with wrong values.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ",",
    "#",
    "&a ",
    "*a",
    "!!int ",
    "!!str ",
    "|",
    ">",
    "\t",
    "\n",
    "\n  ",
    "\"",
    "'",
    "?",
    "%YAML 1.2\n",
    "---\n",
    "...\n",
    "<<: *a\n",
    "attempts: many",
    "outputs: dist",
    "inputs: [..]",
    "outputs: [/etc]",
    "timeout: forever",
    "run: [1]",
    "task:",
    "jobs:",
    "plan:",
    "~",
    "null",
    "0x10",
    "1e400",
    "-1",
    "\u{feff}",
    "\u{1b}[2J",
    "\0",
    "é",
    "🦀",
    "max_visits: 0",
    "verdicts: {}",
    "limits: { step_output: 5m }",
];

fn no_env(_: &str) -> Option<String> {
    None
}

/// Loads `text`; panics (failing the property) on anything but a pipeline or good errors.
fn load_ok(text: &str) {
    let file = Path::new("fuzz.yml");
    let scope = CheckScope {
        job: None,
        env: &no_env,
        machine: false,
    };
    let Err(err) = pipeline::load_text(file, text, &scope) else {
        return;
    };
    assert!(!err.0.is_empty(), "an error without a problem for {text:?}");
    for d in &err.0 {
        let shown = d.to_string();
        assert!(shown.starts_with("fuzz.yml"), "no file in {shown:?}");
        assert!(!d.message.trim().is_empty(), "no message for {text:?}");
        assert!(!d.hint.trim().is_empty(), "no hint in {shown:?}");
        for leak in [
            "Budget",
            "Nodes {",
            "DuplicateKeyPolicy",
            "Options",
            "panicked",
        ] {
            assert!(!shown.contains(leak), "internal text in {shown:?}");
        }
        // What the parser rejects it can place.
        if matches!(
            d.problem,
            Problem::Syntax | Problem::WrongType | Problem::UnknownKey
        ) {
            assert!(d.line.is_some(), "no line for {shown:?} of {text:?}");
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, &'static str),
    InsertChar(usize, char),
    Delete(usize, usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = 0..VALID.len();
    prop_oneof![
        (at.clone(), proptest::sample::select(TOKENS)).prop_map(|(i, t)| Edit::Insert(i, t)),
        (at.clone(), any::<char>()).prop_map(|(i, c)| Edit::InsertChar(i, c)),
        (at.clone(), 1usize..40).prop_map(|(i, n)| Edit::Delete(i, n)),
        (0usize..60, 0usize..60).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut s = text.to_owned();
    let floor = |s: &str, mut i: usize| {
        i = i.min(s.len());
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    for e in edits {
        match *e {
            Edit::Insert(i, t) => {
                let i = floor(&s, i);
                s.insert_str(i, t);
            }
            Edit::InsertChar(i, c) => {
                let i = floor(&s, i);
                s.insert(i, c);
            }
            Edit::Delete(i, n) => {
                let a = floor(&s, i);
                let b = floor(&s, a + n);
                s.replace_range(a..b, "");
            }
            Edit::SwapLines(a, b) => {
                let mut lines: Vec<&str> = s.lines().collect();
                if a < lines.len() && b < lines.len() {
                    lines.swap(a, b);
                }
                s = lines.join("\n");
            }
        }
    }
    s
}

/// A value of the format's vocabulary, nested a little.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        proptest::sample::select(
            &[
                "true", "1", "0", "-3", "30s", "2m", "many", "\"\"", "main", "[]", "{}", "dist",
                "\"a: b\"", "null", "1MiB", "reject", "next",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-z/._-]{0,12}",
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec((key(), inner), 0..4).prop_map(|kv| {
                let body: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{ {} }}", body.join(", "))
            }),
        ]
    })
}

fn key() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(
        &[
            "task",
            "run",
            "agent",
            "get",
            "put",
            "approval",
            "do",
            "in_parallel",
            "try",
            "inputs",
            "outputs",
            "attempts",
            "timeout",
            "env",
            "prompt",
            "verdicts",
            "tools",
            "name",
            "source",
            "plan",
            "jobs",
            "agents",
            "resources",
            "steps",
            "limit",
            "max_visits",
            "volatile",
            "assert",
            "budget",
            "ensure",
            "on_failure",
            "limits",
            "cache",
            "prices",
            "message",
            "on_timeout",
            "path",
            "args",
            "dir",
        ][..],
    )
}

/// A pipeline assembled from steps of random keys and values.
fn assembled() -> impl Strategy<Value = String> {
    let step = proptest::collection::vec((key(), value()), 1..5).prop_map(|kv| {
        let mut lines = kv.into_iter().map(|(k, v)| format!("{k}: {v}"));
        let first = lines.next().unwrap_or_default();
        let rest: Vec<String> = lines.map(|l| format!("    {l}")).collect();
        format!("  - {first}\n{}", rest.join("\n"))
    });
    proptest::collection::vec(step, 0..5).prop_map(|steps| format!("plan:\n{}\n", steps.join("\n")))
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_loads_or_fails_cleanly(text in any::<String>()) {
        load_ok(&text);
    }

    #[test]
    fn an_edited_pipeline_loads_or_fails_cleanly(edits in proptest::collection::vec(edit(), 1..6)) {
        load_ok(&apply(VALID, &edits));
    }

    #[test]
    fn an_assembled_pipeline_loads_or_fails_cleanly(text in assembled()) {
        load_ok(&text);
    }
}

#[test]
fn the_unedited_pipeline_loads() {
    let file = Path::new("fuzz.yml");
    let scope = CheckScope {
        job: None,
        env: &no_env,
        machine: false,
    };
    if let Err(e) = pipeline::load_text(file, VALID, &scope) {
        panic!("{e}");
    }
}
