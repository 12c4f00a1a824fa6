//! The README's main job on a real small model: examples/quickstart.yml against the local
//! model server (scripts/local-model), exactly as a user runs it.
//!
//! `scripts/test` (the README's test command, and CI) starts the model and sets
//! `TREADLE_REAL_MODEL=1`, which makes this test mandatory; without it the test says it did
//! not run, so a plain `cargo test` works on a machine with no model.

mod common;

use std::path::Path;

use common::Fixture;

#[test]
fn the_quickstart_passes_its_asserts_on_the_real_local_model() {
    if std::env::var("TREADLE_REAL_MODEL").as_deref() != Ok("1") {
        eprintln!(
            "real-model pipeline test not run: scripts/test sets TREADLE_REAL_MODEL=1 and starts the model"
        );
        return;
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join("quickstart.yml");
    let f = Fixture::new(&std::fs::read_to_string(example).expect("quickstart.yml"));
    let url =
        std::env::var("TREADLE_LOCAL_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
    let out = run.stdout();
    eprintln!("{out}");
    run.expect_code(0);
    assert!(
        out.contains("→ read_file"),
        "the model called the tool:\n{out}"
    );
    assert!(out.contains("PELICAN"), "the answer streamed:\n{out}");
    assert!(out.contains("succeeded"), "{out}");
}
