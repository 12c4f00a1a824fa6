//! The README's main job on a real small model: examples/quickstart.yml against the local
//! model server (scripts/local-model), exactly as a user runs it.
//!
//! The test is `#[ignore]`d, so a plain `cargo test` on a machine with no model lists it
//! as ignored rather than passing it silently; `scripts/test` (the README's test command,
//! and CI) starts the model and runs it with `--include-ignored`, where it is mandatory.

mod common;

use common::{Fixture, example};

#[test]
#[ignore = "needs a real model: scripts/test runs it"]
fn the_quickstart_passes_its_asserts_on_the_real_local_model() {
    let f = Fixture::new(&example("quickstart.yml"));
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
