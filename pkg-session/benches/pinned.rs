//! Runs `benches/pinned.py` (issue 32: CPU and memory per step on a pinned core, treadle
//! against a raw reqwest loop) with this profile's `bench_turn` example.
//!
//! `cargo bench -p treadle-session --bench pinned` runs the full table (build the example
//! first: `cargo build --release -p treadle-session --example bench_turn`; or run
//! `python3 benches/pinned.py`, which builds it). Under `cargo test` (no `--bench`
//! argument) it is the smoke run: tiny sizes, once, with the test profile's example, which
//! `cargo test` builds beside this binary. The smoke run checks that the script, the
//! server and both drivers still work together and that the table comes out; it times
//! nothing that is asserted.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // target/<profile>/deps/pinned-<hash> -> target/<profile>/examples/bench_turn
    let example = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples").join("bench_turn")));
    let required = std::env::var_os("TREADLE_REQUIRE_PINNED_BENCH").is_some();
    let Some(example) = example.filter(|p| p.exists()) else {
        let why = "pinned: skipped, no bench_turn example beside this binary \
                   (cargo build -p treadle-session --example bench_turn)";
        assert!(!required, "{why}");
        eprintln!("{why}");
        return;
    };
    let mut command = Command::new("python3");
    command
        .arg(root.join("benches").join("pinned.py"))
        .arg("--bin")
        .arg(&example);
    if !bench {
        command.arg("--quick");
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(e) => {
            let why = format!("pinned: skipped, python3 could not be started: {e}");
            assert!(!required, "{why}");
            eprintln!("{why}");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "benches/pinned.py failed");
    // The table's header and one row per configuration of the smoke run.
    assert!(stdout.contains("| K x S |"), "no table in: {stdout}");
    if !bench {
        assert!(stdout.contains("| 3 x 1 |") && stdout.contains("| 2 x 4 |"));
    }
}
