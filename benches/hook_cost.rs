//! Benchmark: what a `pre_tool_use` command hook costs a tool call (issue 28 item 6), and
//! that a call no hook matches pays nothing.
//!
//! `treadle run` of one agent step whose scripted model calls `read_file` CALLS times, one
//! call per model reply, three ways, each round running all three in turn:
//! * `none`: no `hooks:`;
//! * `unmatched`: a `pre_tool_use` hook whose matcher names a tool the step never calls;
//! * `matched`: a `pre_tool_use` hook on `read_file` running `exit 0` (one `sh` started,
//!   confined by Landlock like a task, per call; its envelope written to its stdin).
//!
//! The figure per call is (way − none) / CALLS, from the fastest of the rounds of each way
//! (warm: a first round is run and dropped). The project is on tmpfs (`/dev/shm`) when there
//! is one, so that the state file's syncs, the same in all three ways, add no noise. Also
//! printed: what starting `sh -c 'exit 0'` with piped stdio costs from this process, the
//! floor of a hook's cost. `cargo bench --bench hook_cost` (release); a smoke run under
//! `cargo test`.

#[allow(dead_code)]
#[path = "support/probe.rs"]
mod probe;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use probe::{loadavg, median};
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
        "    hooks:\n      pre_tool_use:\n        - matcher: write_file\n          command: exit 0\n",
    ),
    (
        "matched",
        "    hooks:\n      pre_tool_use:\n        - matcher: read_file\n          command: exit 0\n",
    ),
];

fn pipeline(hooks: &str, calls: usize) -> String {
    format!(
        "agents:\n  - name: reader\n    tools: [read_file]\n    max_turns: {}\n{hooks}jobs:\n  - name: j\n    plan:\n      - agent: reader\n        name: read\n        prompt: Read it.\n",
        calls + 2
    )
}

fn script(calls: usize) -> Script {
    let mut replies: Vec<Reply> = (0..calls)
        .map(|_| Reply::tool_call("read_file", json!({ "path": "small.txt" })))
        .collect();
    replies.push(Reply::text("Done."));
    Script::new(replies)
}

/// One `treadle run` of the way `hooks` in `dir` against a fresh scripted server: its wall
/// time.
async fn run_once(dir: &Path, hooks: &str) -> Duration {
    let calls = calls();
    std::fs::write(dir.join("treadle.yml"), pipeline(hooks, calls)).expect("pipeline");
    let _ = std::fs::remove_dir_all(dir.join(".treadle"));
    let server = ScriptedServer::start(script(calls)).await.expect("server");
    let url = server.base_url().to_owned();
    let dir = dir.to_path_buf();
    let (took, out) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_treadle"))
            .arg("run")
            .current_dir(&dir)
            .env("TREADLE_LOCAL_URL", url)
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("treadle run");
        (t.elapsed(), out)
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
    took
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
    std::fs::write(dir.path().join("small.txt"), "a small file\n").expect("file");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let best = runtime.block_on(async {
        let mut best = [Duration::MAX; 3];
        for round in 0..=rounds() {
            for (i, (_, hooks)) in WAYS.iter().enumerate() {
                let took = run_once(dir.path(), hooks).await;
                // Round 0 warms the page cache and the binary; it is not counted.
                if round > 0 {
                    best[i] = best[i].min(took);
                }
            }
        }
        best
    });
    let per_call =
        |i: usize| (best[i].as_secs_f64() - best[0].as_secs_f64()) * 1e6 / calls() as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{}",
        json!({
            "bench": "hook_cost", "calls": calls(), "rounds": rounds(),
            "run_ms": { "none": ms(best[0]), "unmatched": ms(best[1]), "matched": ms(best[2]) },
            "unmatched_extra_per_call_us": per_call(1),
            "matched_extra_per_call_us": per_call(2),
            "bare_sh_start_us": bare_start_us(),
            "on_tmpfs": dir.path().starts_with(shm),
            "loadavg": loadavg(),
        })
    );
}
