//! Benchmark: treadle's overhead per step on a 100-step pipeline of `true` tasks.
//!
//! The overhead is the wall time of `treadle run` minus what the commands cost on their
//! own: each task is `sh -c true`, so that cost is measured separately by spawning
//! `sh -c true` 100 times from this process, and subtracted. Two figures per round:
//! `per_step_overhead_ms` charges everything (process start, state file open, the run's
//! bookkeeping) to the 100 steps; `marginal_overhead_ms` compares with a 1-step pipeline
//! so that the fixed start-up cost drops out. Prints one JSON object per line.
//!
//! Wall time depends on how busy the machine is, so each line also gives the load average
//! and `cpu_ms`: the CPU time of the `treadle run` process and the commands it waited for
//! (from `/proc/self/stat`, in clock ticks of 10 ms).
//!
//! `cargo bench --bench pipeline` (release profile). The target is < 5 ms per step.

#[path = "support/probe.rs"]
mod probe;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use probe::children_cpu_ms;

const STEPS: usize = 100;
const ROUNDS: usize = 5;

fn pipeline(steps: usize) -> String {
    let mut yaml = String::from("jobs:\n  - name: bench\n    plan:\n");
    for i in 0..steps {
        yaml.push_str(&format!("      - task: t{i}\n        run: 'true'\n"));
    }
    yaml
}

/// The cost of the commands alone: `sh -c true`, `n` times in a row.
fn sh_true(n: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        let ok = Command::new("sh")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("sh -c true failed");
            std::process::exit(2);
        }
    }
    start.elapsed()
}

/// The wall time of one `treadle run` of `file` (a fresh state file each time).
fn treadle_run(dir: &Path, file: &str) -> Duration {
    let _ = std::fs::remove_dir_all(dir.join(".treadle"));
    let start = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .args(["run", file])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status();
    let took = start.elapsed();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("treadle run {file} failed");
        std::process::exit(2);
    }
    took
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "null".to_owned())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot make a temp dir: {e}");
            std::process::exit(2);
        }
    };
    for (name, steps) in [("p100.yml", STEPS), ("p1.yml", 1)] {
        if let Err(e) = std::fs::write(dir.path().join(name), pipeline(steps)) {
            eprintln!("cannot write {name}: {e}");
            std::process::exit(2);
        }
    }
    // Warm up the page cache and the binary.
    treadle_run(dir.path(), "p1.yml");
    let mut best = f64::MAX;
    for round in 0..ROUNDS {
        let commands = ms(sh_true(STEPS));
        let cpu_before = children_cpu_ms();
        let wall = ms(treadle_run(dir.path(), "p100.yml"));
        let cpu = children_cpu_ms() - cpu_before;
        let one = ms(treadle_run(dir.path(), "p1.yml"));
        let per_step = (wall - commands) / STEPS as f64;
        let marginal = (wall - one) / (STEPS - 1) as f64 - commands / STEPS as f64;
        best = best.min(per_step);
        println!(
            "{{\"bench\":\"pipeline_true\",\"round\":{round},\"steps\":{STEPS},\"wall_ms\":{wall:.1},\"commands_ms\":{commands:.1},\"one_step_run_ms\":{one:.1},\"per_step_overhead_ms\":{per_step:.3},\"marginal_overhead_ms\":{marginal:.3},\"cpu_ms\":{cpu:.0},\"load_avg\":{}}}",
            load_average()
        );
    }
    println!(
        "{{\"bench\":\"pipeline_true\",\"summary\":true,\"best_per_step_overhead_ms\":{best:.3},\"target_ms\":5.0,\"ok\":{}}}",
        best < 5.0
    );
}
