//! The task-only example pipelines run as shipped (the agent examples are run against the
//! scripted server in agent_pipelines.rs).

use crate::common;

use std::path::Path;

use common::Fixture;

fn run_example(name: &str) -> common::Run {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name),
    )
    .expect("example");
    Fixture::new(&yaml).treadle(&["run"])
}

#[test]
fn hello_runs() {
    let run = run_example("hello.yml");
    run.expect_code(0);
    assert!(run.stdout().contains("hello from treadle"));
}

#[test]
fn build_passes_outputs_between_tasks() {
    let run = run_example("build.yml");
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("upper ok") && out.contains("sorted ok"),
        "{out}"
    );
    assert!(out.contains("GAMMA"), "{out}");
}

#[test]
fn examples_validate_without_a_model() {
    for name in ["hello.yml", "build.yml"] {
        let yaml = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples")
                .join(name),
        )
        .unwrap();
        Fixture::new(&yaml).treadle(&["validate"]).expect_code(0);
    }
}
