//! Every break in proofs/break_rules.py still applies to the code it breaks: its file
//! exists, its pattern is found there, and the proof it runs exists. Without this, moving a
//! file or rewriting a line silently turns a break into "pattern not found", which says
//! nothing about whether the proof still catches it.

use std::path::Path;
use std::process::Command;

#[test]
fn every_break_still_finds_the_line_it_breaks() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("break_rules.py");
    let out = match Command::new("python3").arg(&script).arg("--check").output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIP every_break_still_finds_the_line_it_breaks: python3 cannot run ({e})");
            return;
        }
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stale breaks in break_rules.py:\n{said}"
    );
    assert!(said.contains(" 0 stale"), "{said}");
}
