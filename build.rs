//! Embeds every page of docs/ in the binary for `treadle docs [PAGE]`: writes
//! `$OUT_DIR/docs_pages.rs`, a sorted list of `(name, text)` pairs, so a page added to
//! docs/ is printed by the command without being listed by hand.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    println!("cargo:rerun-if-changed={}", docs.display());
    let mut pages: Vec<(String, String)> = match std::fs::read_dir(&docs) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .filter_map(|p| {
                let name = p.file_stem()?.to_str()?.to_owned();
                Some((name, p.display().to_string()))
            })
            .collect(),
        // A source tree without docs/ (a trimmed package) builds with no pages.
        Err(_) => Vec::new(),
    };
    pages.sort();
    let mut out = String::from("&[\n");
    for (name, path) in &pages {
        println!("cargo:rerun-if-changed={path}");
        let _ = writeln!(out, "    ({name:?}, include_str!({path:?})),");
    }
    out.push_str("]\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("docs_pages.rs");
    if let Err(e) = std::fs::write(&target, out) {
        // A build script reports failure by panicking; say which file could not be written.
        panic!("cannot write {}: {e}", target.display());
    }
}
