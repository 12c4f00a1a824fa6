//! The real MCP fixture server (a binary of the proofs package) for the pipeline tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The fixture server binary. Another package's binary has no `CARGO_BIN_EXE_*` here, so it
/// is found beside this test's executable, where `cargo test --workspace --all-targets` (the
/// README's test command) builds it. When it is missing or older than its source (a run of
/// this test binary alone), it is built first.
///
/// Calling `cargo build` every time was not free: a plain build resolves the dependencies'
/// features without the dev-dependencies, so it compiled hyper, rustls and their kin a second
/// time into the target directory (minutes of CPU in every CI run, while the tests waited).
pub fn fixture_server() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().expect("the test's own path");
    // target/PROFILE/deps/integration-HASH -> target/PROFILE/treadle-mcp-fixture
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("treadle-mcp-fixture"))
        .expect("the test runs from target/PROFILE/deps");
    let sources = [
        root.join("proofs/src/bin/mcp_fixture.rs"),
        root.join("proofs/Cargo.toml"),
    ];
    if !newer_than(&bin, &sources) {
        build(root);
    }
    assert!(bin.is_file(), "no fixture server at {}", bin.display());
    bin
}

/// Whether `bin` exists and was written after every one of `sources`.
fn newer_than(bin: &Path, sources: &[PathBuf]) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(bin) else {
        return false;
    };
    sources
        .iter()
        .all(|s| modified(s).is_none_or(|t: SystemTime| t <= built))
}

/// Builds the fixture server into this test's target directory.
fn build(root: &Path) {
    let built = Command::new(env!("CARGO"))
        // `--workspace`, not `-p treadle-proofs`: features unify closer to `cargo test
        // --workspace`, so fewer of the dependencies already built are compiled again.
        .args(["build", "--workspace", "--bin", "treadle-mcp-fixture"])
        .current_dir(root)
        .output()
        .expect("run cargo build");
    assert!(
        built.status.success(),
        "building treadle-mcp-fixture failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
}
