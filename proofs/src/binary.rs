//! The `treadle` binary for the product-level proofs (rules 13 and 16), which run it as a
//! real process: the one built beside the test executable, checked to be newer than the
//! sources.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The `treadle` binary built beside this test, or a failure saying how to build it.
pub fn treadle_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/debug/deps/proofs-HASH -> target/debug/treadle
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("treadle"))
        .expect("the test runs from target/PROFILE/deps");
    let how = "build it first: `cargo build -p treadle --bin treadle` (or run `cargo test --workspace`, which builds it)";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("no treadle binary at {} ({e}); {how}", bin.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = ["src", "pkg-session/src", "pkg-event/src", "pkg-hook/src"]
        .iter()
        .filter_map(|dir| newest_in(&root.join(dir)))
        .max();
    if let Some((changed, file)) = newest {
        assert!(
            changed <= built,
            "the treadle binary at {} is older than {}: {how}",
            bin.display(),
            file.display()
        );
    }
    bin
}

/// The most recently modified file under `dir`, with its time.
fn newest_in(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_in(&path)
        } else {
            entry.metadata().ok()?.modified().ok().map(|t| (t, path))
        };
        if let Some(found) = found
            && newest.as_ref().is_none_or(|(t, _)| found.0 > *t)
        {
            newest = Some(found);
        }
    }
    newest
}
