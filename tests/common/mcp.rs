//! The real MCP fixture server (a binary of the proofs package) for the pipeline tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture server binary. Another package's binary has no `CARGO_BIN_EXE_*` here, so
/// it is built (a no-op after `cargo test --workspace`, 1.1 s) and found in the target dir.
pub fn fixture_server() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = Command::new(env!("CARGO"))
        // `--workspace`, not `-p treadle-proofs`: features unify as in `cargo test
        // --workspace`, so the dependencies already built are reused (with `-p`, ring,
        // rustls, reqwest and the session crate were compiled again: 2 min 21 s here).
        .args(["build", "--workspace", "--bin", "treadle-mcp-fixture"])
        .current_dir(root)
        .output()
        .expect("run cargo build");
    assert!(
        built.status.success(),
        "building treadle-mcp-fixture failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| root.join("target"), |t| root.join(t));
    let bin = target.join("debug").join("treadle-mcp-fixture");
    assert!(bin.is_file(), "no fixture server at {}", bin.display());
    bin
}
