//! Benchmark: what a `pre_tool_use` command hook costs a tool call (issue 28 item 6), and
//! that a call no hook matches pays nothing.
//!
//! `treadle run` of one agent step whose scripted model calls `write_file` CALLS times (a
//! small file of its own each time, in the step directory), one call per model reply, three
//! ways, each round running all three in turn:
//! * `none`: no `hooks:`;
//! * `unmatched`: a `pre_tool_use` hook whose matcher names a tool the step never calls;
//! * `matched`: a `pre_tool_use` hook on `write_file` running `exit 0` (one `sh` started,
//!   confined by Landlock like a task, per call; its envelope written to its stdin).
//!
//! The figure per call is (way − none) / CALLS, from the fastest of the rounds of each way
//! (warm: a first round is run and dropped), and the same in CPU time (the median over the
//! rounds of what `treadle run` and the hooks it started used, which a loaded machine moves
//! less than wall time). The project is on tmpfs (`/dev/shm`) when there
//! is one, so that the state file's syncs, the same in all three ways, add no noise. Also
//! printed: what starting `sh -c 'exit 0'` with piped stdio costs from this process, the
//! floor of a hook's cost. `cargo bench --bench hook_cost` (release); a smoke run under
//! `cargo test`.

#[path = "support/probe.rs"]
mod probe;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use probe::{children_cpu_ms, loadavg, median};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn calls() -> usize {
    if full_run() { 200 } else { 4 }
}

fn rounds() -> usize {
    if full_run() { 6 } else { 2 }
}

const WAYS: [(&str, &str); 3] = [
    ("none", ""),
    (
        "unmatched",
        "    hooks:\n      pre_tool_use:\n        - matcher: read_file\n          command: exit 0\n",
    ),
    (
        "matched",
        "    hooks:\n      pre_tool_use:\n        - matcher: write_file\n          command: exit 0\n",
    ),
];

fn pipeline(hooks: &str, calls: usize) -> String {
    format!(
        "agents:\n  - name: reader\n    tools: [write_file]\n    max_turns: {}\n{hooks}jobs:\n  - name: j\n    plan:\n      - agent: reader\n        name: read\n        prompt: Read it.\n",
        calls + 2
    )
}

fn script(calls: usize) -> Script {
    let mut replies: Vec<Reply> = (0..calls)
        .map(|i| {
            Reply::tool_call(
                "write_file",
                json!({ "path": format!("f{i}.txt"), "content": "x" }),
            )
        })
        .collect();
    replies.push(Reply::text("Done."));
    Script::new(replies)
}

/// One `treadle run` of the way `hooks` in `dir` against a fresh scripted server: its wall
/// time, and the CPU time (ms) of `treadle run` and of the hook processes it started.
async fn run_once(dir: &Path, hooks: &str) -> (Duration, f64) {
    let calls = calls();
    std::fs::write(dir.join("treadle.yml"), pipeline(hooks, calls)).expect("pipeline");
    let _ = std::fs::remove_dir_all(dir.join(".treadle"));
    let server = ScriptedServer::start(script(calls)).await.expect("server");
    let url = server.base_url().to_owned();
    let dir = dir.to_path_buf();
    let (took, cpu, out) = tokio::task::spawn_blocking(move || {
        let cpu = children_cpu_ms();
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_treadle"))
            .arg("run")
            .current_dir(&dir)
            .env("TREADLE_LOCAL_URL", url)
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("treadle run");
        (t.elapsed(), children_cpu_ms() - cpu, out)
    })
    .await
    .expect("run thread");
    assert!(
        out.status.success(),
        "treadle run failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let results = server
        .requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .count();
    assert!(
        results >= calls,
        "only {results} tool results for {calls} calls"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("✗ write_file"), "a call failed:\n{stdout}");
    // The matched hook ran once per call; the others never.
    let ran = stdout.matches("hook hooks.pre_tool_use[0]").count();
    let expected = if hooks.contains("matcher: write_file") {
        calls
    } else {
        0
    };
    assert_eq!(ran, expected, "hook runs:\n{stdout}");
    (took, cpu)
}

/// Median µs to start `sh -c 'exit 0'` with piped stdin, stdout and stderr and wait for it.
fn bare_start_us() -> f64 {
    let samples = (0..200)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new("/bin/sh")
                .args(["-c", "exit 0"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output();
            assert!(out.is_ok_and(|o| o.status.success()), "sh -c 'exit 0'");
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(samples)
}

fn main() {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (best, cpu) = runtime.block_on(async {
        let mut best = [Duration::MAX; 3];
        let mut cpu: [Vec<f64>; 3] = Default::default();
        for round in 0..=rounds() {
            for (i, (_, hooks)) in WAYS.iter().enumerate() {
                let (took, used) = run_once(dir.path(), hooks).await;
                // Round 0 warms the page cache and the binary; it is not counted.
                if round > 0 {
                    best[i] = best[i].min(took);
                    cpu[i].push(used);
                }
            }
        }
        (best, cpu.map(median))
    });
    let per_call =
        |i: usize| (best[i].as_secs_f64() - best[0].as_secs_f64()) * 1e6 / calls() as f64;
    let cpu_per_call = |i: usize| (cpu[i] - cpu[0]) * 1e3 / calls() as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{}",
        json!({
            "bench": "hook_cost", "calls": calls(), "rounds": rounds(),
            "run_ms": { "none": ms(best[0]), "unmatched": ms(best[1]), "matched": ms(best[2]) },
            "unmatched_extra_per_call_us": per_call(1),
            "matched_extra_per_call_us": per_call(2),
            // Median CPU of treadle run and the hooks it started, per run (10 ms ticks).
            "cpu_ms": { "none": cpu[0], "unmatched": cpu[1], "matched": cpu[2] },
            "unmatched_extra_cpu_per_call_us": cpu_per_call(1),
            "matched_extra_cpu_per_call_us": cpu_per_call(2),
            "bare_sh_start_us": bare_start_us(),
            "on_tmpfs": dir.path().starts_with(shm),
            "loadavg": loadavg(),
        })
    );
}
