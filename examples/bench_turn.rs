//! The turn benchmark driver, comparable across agent frameworks on the same server.
//!
//! ```text
//! cargo run --release -p treadle-scripted -- --echo-until 20 &       # prints its URL
//! cargo run --release --example bench_turn -- --endpoint URL --steps 20 --sessions 100
//! ```
//!
//! S concurrent sessions each submit one input; the model keeps calling `echo {"i": n}`
//! until the request holds K tool results, then answers. Every session streams, journals
//! durably (one redb journal shared by all, as a real process would) and must end in
//! `TurnDone` after exactly K tool steps. Prints one JSON line.

use std::time::Instant;

use clap::Parser;
use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::{Effect, FnTool, Journal, JournalOptions, Session, ToolError};

#[derive(Parser)]
struct Args {
    /// Base URL of an OpenAI-compatible endpoint playing the echo workload.
    #[arg(long)]
    endpoint: String,
    /// Tool steps each session must make before the model answers.
    #[arg(long, default_value_t = 20)]
    steps: u32,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Skip the fsync of each journal batch (durability off).
    #[arg(long)]
    no_fsync: bool,
    /// Leave the echo tool at the default effect, effectful: each call then journals its
    /// intent before it runs and its result after (rule 11), one more log sync per step.
    /// Without this the tool is declared pure, which is what an echo is.
    #[arg(long)]
    effectful: bool,
    #[arg(long, default_value = "scripted")]
    model: String,
}

#[derive(Deserialize, JsonSchema)]
struct Echo {
    i: serde_json::Value,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let journal = Journal::open_with(
        dir.path().join("bench.redb"),
        JournalOptions {
            durable: !args.no_fsync,
            ..JournalOptions::default()
        },
    )?;

    let mut sessions = Vec::with_capacity(args.sessions);
    for _ in 0..args.sessions {
        let session = Session::builder()
            .endpoint(&args.endpoint)
            .model(&args.model)
            .journal(journal.clone())
            .max_steps(args.steps + 2)
            // Long runs (`--steps 1000`) must not meet the default per-turn call limit.
            .max_tool_calls_per_turn(args.steps + 2)
            .tool(
                FnTool::new("echo", "Returns its argument.", |a: Echo| async move {
                    Ok::<_, ToolError>(a.i.to_string())
                })
                .effect(if args.effectful {
                    Effect::Effectful
                } else {
                    Effect::Pure
                }),
            )
            .start()
            .await?;
        sessions.push(session);
    }

    let started = Instant::now();
    let runs = sessions
        .iter()
        .map(|s| s.run("Call echo until told to stop."));
    let reports = futures::future::join_all(runs).await;
    let wall = started.elapsed();

    for report in reports {
        let report = report?;
        // K tool steps plus the final text step.
        if !report.is_done() || report.steps != args.steps + 1 {
            return Err(format!("a session ended badly: {report:?}").into());
        }
    }
    for session in &sessions {
        session.shutdown().await;
    }
    let total_steps = (args.steps as f64 + 1.0) * args.sessions as f64;
    println!(
        "{}",
        serde_json::json!({
            "framework": "treadle",
            "steps": args.steps,
            "sessions": args.sessions,
            "effectful": args.effectful,
            "wall_s": wall.as_secs_f64(),
            "per_step_us": wall.as_secs_f64() * 1e6 / total_steps,
            "peak_rss_mb": peak_rss_mb(),
        })
    );
    Ok(())
}

/// The process's peak resident set size, from Linux's /proc (0 elsewhere).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
