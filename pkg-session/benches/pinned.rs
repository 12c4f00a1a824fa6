//! Runs `benches/pinned.py` (issue 32: CPU and memory per step on a pinned core, treadle
//! against a raw reqwest loop) with this binary as the driver it pins.
//!
//! This binary is the `bench_turn` driver too (`pkg-session/examples/bench_turn/driver.rs`,
//! compiled in): started with `--endpoint` it drives; otherwise it runs the script, which
//! starts the server and then this binary once per driver run. So the bench needs no other
//! build, under `cargo bench` (release: the full table) or `cargo test` (the smoke run: tiny
//! sizes, once, which checks that the script, the server and both drivers still work
//! together and that the table comes out; nothing timed is asserted). `python3
//! benches/pinned.py` alone does the same with the release `bench_turn` example.

use std::path::PathBuf;
use std::process::Command;

#[path = "../examples/bench_turn/driver.rs"]
mod driver;
// The bench support file serves several benches; this one uses part of it.
#[allow(dead_code)]
#[path = "../../benches/support/heap.rs"]
mod heap;
#[path = "../../benches/support/probe.rs"]
mod probe;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|a| a == "--endpoint") {
        return driver::main(std::env::args());
    }
    let bench = std::env::args().any(|a| a == "--bench");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let required = std::env::var_os("TREADLE_REQUIRE_PINNED_BENCH").is_some();
    let mut command = Command::new("python3");
    command
        .arg(root.join("benches").join("pinned.py"))
        .arg("--bin")
        .arg(std::env::current_exe()?);
    if !bench {
        command.arg("--quick");
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(e) => {
            let why = format!("pinned: skipped, python3 could not be started: {e}");
            assert!(!required, "{why}");
            eprintln!("{why}");
            return Ok(());
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
    Ok(())
}
