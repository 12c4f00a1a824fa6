//! Benchmark: treadle's overhead per step on pipelines of 10, 100 and 1,000 `true` tasks.
//!
//! The overhead is the wall time of `treadle run` minus what the commands cost on their
//! own: each task is `sh -c true`, so that cost is measured separately by spawning
//! `sh -c true` N times from this process, and subtracted. `per_step_overhead_ms` charges
//! everything (process start, state file open, the run's bookkeeping) to the N steps;
//! `marginal_overhead_ms` compares with a 1-step pipeline so that the fixed start-up cost
//! drops out. Whether the cost per step grows with the pipeline's size is read across the
//! sizes.
//!
//! Wall time depends on how busy the machine is, so each line also gives the load average
//! and CPU time: `cpu_ms`, the `treadle run` process and the commands it waited for
//! (`wait4`'s rusage, in µs); `commands_cpu_ms`, the N `sh -c true` alone, the same way;
//! `treadle_cpu_ms`, the difference; and `own_cpu_ms`, the `treadle run` process alone
//! (its `/proc/PID/stat` read while it is a zombie, before it is reaped: 10 ms ticks).
//!
//! `cargo bench --bench pipeline` (release profile). Sizes: `TREADLE_BENCH_PIPELINE_STEPS`
//! (comma-separated, default 10,100,1000; 2 and 5, one round, under `cargo test`). The
//! target is < 5 ms per step.
//!
//! **The regression guard** (issue 42): every run, `cargo test` (so `scripts/test`) included,
//! also measures the CPU one more `true` task costs (`treadle run` of 41 tasks against 1
//! task, the commands included) as a ratio to one `sh -c true` spawned by this process, the
//! median of three rounds. A ratio is what the machine and its load change least; a time
//! is not. It fails when the ratio exceeds the committed baseline of the build's profile
//! (`benches/pipeline_baseline.txt`) by more than 30 %. `TREADLE_BENCH_BASELINE=write`
//! writes the measured ratio as that profile's new baseline.

#[path = "support/probe.rs"]
mod probe;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use probe::{loadavg, median};

/// What one child process cost: wall time, CPU with its waited-for children (µs
/// precision), and its own CPU alone (10 ms ticks; `None` where /proc is not readable).
struct Cost {
    wall: Duration,
    cpu_ms: f64,
    own_cpu_ms: Option<f64>,
}

fn pipeline(steps: usize) -> String {
    let mut yaml = String::from("jobs:\n  - name: bench\n    plan:\n");
    for i in 0..steps {
        yaml.push_str(&format!("      - task: t{i}\n        run: 'true'\n"));
    }
    yaml
}

/// Whether this is a real benchmark run. `cargo bench` passes `--bench`; `cargo test`
/// runs this binary without it, as a quick smoke test of the benchmark code itself.
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn sizes() -> Vec<usize> {
    let listed: Vec<usize> = std::env::var("TREADLE_BENCH_PIPELINE_STEPS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect();
    if !listed.is_empty() {
        listed
    } else if full_run() {
        vec![10, 100, 1000]
    } else {
        vec![2, 5]
    }
}

fn fail(what: &str) -> ! {
    eprintln!("{what}");
    std::process::exit(2)
}

/// Runs `command` to its end and says what it cost. It is waited for twice: first without
/// reaping it (`waitid` with `WNOWAIT`), so that its own CPU time can be read from /proc,
/// then by `wait4`, whose rusage adds the children it waited for.
// The child is reaped by that `wait4`, not by `Child::wait`, which would reap it before its
// own CPU time could be read.
#[allow(clippy::zombie_processes)]
fn measure(mut command: Command) -> Cost {
    let start = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot spawn: {e}")));
    let pid = child.id();
    // SAFETY: waitid writes into a zeroed siginfo_t that outlives the call.
    let waited = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
    };
    let wall = start.elapsed();
    let own_cpu_ms = (waited == 0).then(|| own_ticks_ms(pid)).flatten();
    let mut status = 0;
    // SAFETY: all-zero bytes are a valid rusage; both pointers outlive the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    if reaped != pid as libc::pid_t || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        fail(&format!("{command:?} failed (status {status})"));
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Cost {
        wall,
        cpu_ms: ms(usage.ru_utime) + ms(usage.ru_stime),
        own_cpu_ms,
    }
}

/// A process's own user + system time from /proc/PID/stat (fields 14 and 15), in ms.
fn own_ticks_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the `(comm)`, which may hold spaces: utime and stime are 11 and 12.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((ticks(11)? + ticks(12)?) * 1e3 / hz)
}

/// The cost of the commands alone: `sh -c true`, `n` times in a row (wall, CPU).
fn sh_true(n: usize) -> (Duration, f64) {
    let (mut wall, mut cpu) = (Duration::ZERO, 0.0);
    for _ in 0..n {
        let mut sh = Command::new("sh");
        sh.args(["-c", "true"]);
        let cost = measure(sh);
        wall += cost.wall;
        cpu += cost.cpu_ms;
    }
    (wall, cpu)
}

/// One `treadle run` of `file` (a fresh state file each time).
fn treadle_run(dir: &Path, file: &str) -> Cost {
    let _ = std::fs::remove_dir_all(dir.join(".treadle"));
    let mut run = Command::new(env!("CARGO_BIN_EXE_treadle"));
    run.args(["run", file]).current_dir(dir);
    measure(run)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The figures of one round at `steps` steps, as a JSON line; returns the overhead per step.
fn round(dir: &Path, steps: usize, round: usize) -> (f64, f64) {
    let (commands, commands_cpu) = sh_true(steps);
    let commands = ms(commands);
    let run = treadle_run(dir, &format!("p{steps}.yml"));
    let one = ms(treadle_run(dir, "p1.yml").wall);
    let wall = ms(run.wall);
    let per_step = (wall - commands) / steps as f64;
    let marginal = if steps > 1 {
        (wall - one) / (steps - 1) as f64 - commands / steps as f64
    } else {
        f64::NAN
    };
    let treadle_cpu = run.cpu_ms - commands_cpu;
    let own = run
        .own_cpu_ms
        .map_or_else(|| "null".to_owned(), |c| format!("{c:.0}"));
    println!(
        "{{\"bench\":\"pipeline_true\",\"round\":{round},\"steps\":{steps},\"wall_ms\":{wall:.1},\"commands_ms\":{commands:.1},\"one_step_run_ms\":{one:.1},\"per_step_overhead_ms\":{per_step:.3},\"marginal_overhead_ms\":{marginal:.3},\"cpu_ms\":{:.1},\"commands_cpu_ms\":{commands_cpu:.1},\"treadle_cpu_ms\":{treadle_cpu:.1},\"treadle_cpu_per_step_ms\":{:.3},\"own_cpu_ms\":{own},\"load_avg\":\"{}\"}}",
        run.cpu_ms,
        treadle_cpu / steps as f64,
        loadavg()
    );
    (per_step, treadle_cpu / steps as f64)
}

fn main() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail(&format!("no temp dir: {e}")));
    let sizes = sizes();
    for steps in sizes.iter().copied().chain([1]) {
        let name = format!("p{steps}.yml");
        if let Err(e) = std::fs::write(dir.path().join(&name), pipeline(steps)) {
            fail(&format!("cannot write {name}: {e}"));
        }
    }
    // Warm up the page cache and the binary.
    treadle_run(dir.path(), "p1.yml");
    let mut best = f64::MAX;
    for steps in sizes {
        let rounds = match (full_run(), steps) {
            (false, _) => 1,
            (true, s) if s >= 1000 => 3,
            _ => 5,
        };
        let (mut overheads, mut cpus) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let (overhead, cpu) = round(dir.path(), steps, r);
            overheads.push(overhead);
            cpus.push(cpu);
        }
        best = overheads.iter().copied().fold(best, f64::min);
        println!(
            "{{\"bench\":\"pipeline_true\",\"steps\":{steps},\"median_per_step_overhead_ms\":{:.3},\"median_treadle_cpu_per_step_ms\":{:.3}}}",
            median(overheads),
            median(cpus)
        );
    }
    guard(dir.path());
    println!(
        "{{\"bench\":\"pipeline_true\",\"summary\":true,\"best_per_step_overhead_ms\":{best:.3},\"target_ms\":5.0,\"ok\":{}}}",
        best < 5.0
    );
}

/// The baseline file: one `PROFILE RATIO` line per build profile.
const BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pipeline_baseline.txt");

/// The profile this binary was built in, as the baseline names it.
fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The CPU of one more `true` task, as a ratio to one `sh -c true`: (CPU of 41 tasks - CPU
/// of 1 task) / 40, over the CPU of one `sh -c true`; the median of three rounds.
fn task_ratio(dir: &Path) -> f64 {
    const N: usize = 41;
    for (name, steps) in [("guard1.yml", 1), ("guard.yml", N)] {
        if let Err(e) = std::fs::write(dir.join(name), pipeline(steps)) {
            fail(&format!("cannot write {name}: {e}"));
        }
    }
    let ratios = (0..3)
        .map(|_| {
            let (_, sh_cpu) = sh_true(N - 1);
            let many = treadle_run(dir, "guard.yml").cpu_ms;
            let one = treadle_run(dir, "guard1.yml").cpu_ms;
            (many - one) / sh_cpu
        })
        .collect();
    median(ratios)
}

/// Fails the run when a task's CPU grew more than 30 % over the committed baseline.
fn guard(dir: &Path) {
    let ratio = task_ratio(dir);
    let profile = profile();
    let text = std::fs::read_to_string(BASELINE).unwrap_or_default();
    if std::env::var("TREADLE_BENCH_BASELINE").as_deref() == Ok("write") {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with(&format!("{profile} ")))
            .map(str::to_owned)
            .collect();
        lines.push(format!("{profile} {ratio:.2}"));
        if let Err(e) = std::fs::write(BASELINE, lines.join("\n") + "\n") {
            fail(&format!("cannot write {BASELINE}: {e}"));
        }
    }
    let baseline = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("{profile} ")))
        .and_then(|v| v.trim().parse::<f64>().ok());
    let Some(baseline) = baseline else {
        println!("SKIP: no {profile} baseline in {BASELINE} (measured ratio {ratio:.2})");
        return;
    };
    let ok = ratio <= baseline * 1.3;
    println!(
        "{{\"bench\":\"pipeline_true\",\"guard\":true,\"profile\":\"{profile}\",\"task_cpu_over_sh_true\":{ratio:.2},\"baseline\":{baseline:.2},\"limit\":{:.2},\"ok\":{ok},\"load_avg\":\"{}\"}}",
        baseline * 1.3,
        loadavg()
    );
    if !ok {
        fail(&format!(
            "a task's CPU regressed: {ratio:.2} x `sh -c true`, more than 1.3 x the baseline \
             {baseline:.2} ({profile}); find the cause, or re-measure the baseline on a quiet \
             machine with TREADLE_BENCH_BASELINE=write if the cost is intended"
        ));
    }
}
