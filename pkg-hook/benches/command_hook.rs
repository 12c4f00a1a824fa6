//! What a `pre_tool_use` command hook costs per tool call, warm: one process start
//! (`/bin/sh -c true`) with its envelope on stdin, against a call the hook's matcher does
//! not match (no process at all) and against no hooks. Prints microseconds per call
//! (median, mean, p90) over the measured calls; docs/benchmarks.md records the figures.
//!
//! `cargo bench -p treadle-hook --bench command_hook` (`CALLS=N` for more calls).

use std::sync::Arc;
use std::time::{Duration, Instant};

use treadle_event::{LoopId, SessionId};
use treadle_hook::{
    CommandHook, CommandSpec, HookCall, HookEvent, HookRunner, Matcher, OperationOutcome, Payload,
};

fn call(tool: &str) -> HookCall {
    HookCall::new(
        SessionId::new(),
        LoopId::new(),
        Payload::ToolCall {
            call_id: "c1".into(),
            name: tool.into(),
            arguments: serde_json::json!({ "command": "cargo test", "timeout_secs": 60 }),
        },
    )
}

/// Times `calls` authorizations of a `tool` call through `runner`; sorted durations.
async fn measure(runner: &HookRunner, tool: &str, calls: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let active = runner.begin(call(tool)).await.expect("allowed");
        active.finish(OperationOutcome::Completed, None).await;
        times.push(started.elapsed());
    }
    times.sort();
    times
}

fn report(name: &str, times: &[Duration]) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = times.iter().map(|d| us(*d)).sum::<f64>() / times.len() as f64;
    let median = us(times[times.len() / 2]);
    let p90 = us(times[times.len() * 9 / 10]);
    println!(
        "{name:<34} {:>6} calls  median {median:>9.2} us  mean {mean:>9.2} us  p90 {p90:>9.2} us",
        times.len()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(500);
    let hook = CommandHook::new(
        CommandSpec::new(HookEvent::PreToolUse, "true")
            .matching(Matcher::new("run_shell").expect("matcher")),
    );
    let hooked = HookRunner::new(vec![Arc::new(hook)]);
    let none = HookRunner::default();
    // Warm: the page cache holds sh, and the first spawns' costs are out of the figures.
    measure(&hooked, "run_shell", 20).await;
    report("no hooks", &measure(&none, "run_shell", calls * 20).await);
    report(
        "hook, call not matched",
        &measure(&hooked, "read_file", calls * 20).await,
    );
    report(
        "hook `true`, call matched",
        &measure(&hooked, "run_shell", calls).await,
    );
}
