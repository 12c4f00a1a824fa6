//! The turn benchmark's driver proper: its command line, treadle's run and the JSON line;
//! shared by the `bench_turn` example and the `pinned` bench (which runs it as a child of
//! itself), both of which declare the `heap` and `probe` modules it uses.

#[path = "raw.rs"]
mod raw;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::{Effect, FnTool, Journal, JournalOptions, Session, Tool, ToolError};

use crate::{heap, probe};

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
    /// Run the raw reqwest + serde_json loop (the floor) instead of treadle.
    #[arg(long)]
    raw: bool,
    /// Run treadle on tokio's single-threaded runtime (the default is `#[tokio::main]`'s
    /// multi-threaded one, with a worker per core the process may use).
    #[arg(long)]
    current_thread: bool,
    /// Exit at once after the turns, the sessions still alive and idle, so that a heap
    /// profiler's "leaked at exit" report (heaptrack) is what idle sessions hold.
    #[arg(long)]
    exit_idle: bool,
    /// Count live heap bytes (a cost on every allocation) to report what an idle session
    /// holds between turns; leave off for timing figures.
    #[arg(long)]
    count_heap: bool,
    #[arg(long, default_value = "scripted")]
    model: String,
}

#[derive(Deserialize, JsonSchema)]
struct Echo {
    i: serde_json::Value,
}

/// Runs the driver with `args` (the program's name first).
pub fn main(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse_from(args);
    if args.count_heap {
        heap::count();
    }
    let runtime = if args.raw || args.current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    let line = if args.raw {
        let (wall, cpu) = runtime.block_on(raw::run(
            &args.endpoint,
            &args.model,
            args.steps,
            args.sessions,
        ))?;
        figures("raw", &args, wall, cpu)
    } else {
        runtime.block_on(treadle(&args))?
    };
    println!("{line}");
    Ok(())
}

/// The JSON line's common part.
fn figures(framework: &str, args: &Args, wall: Duration, cpu: Duration) -> serde_json::Value {
    let total_steps = (args.steps as f64 + 1.0) * args.sessions as f64;
    serde_json::json!({
        "framework": framework,
        "steps": args.steps,
        "sessions": args.sessions,
        "effectful": args.effectful,
        "wall_s": wall.as_secs_f64(),
        "per_step_us": wall.as_secs_f64() * 1e6 / total_steps,
        "cpu_per_step_us": cpu.as_secs_f64() * 1e6 / total_steps,
        "peak_rss_mb": probe::peak_rss_mb(),
    })
}

async fn treadle(args: &Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let journal = Journal::open_with(
        dir.path().join("bench.redb"),
        JournalOptions {
            durable: !args.no_fsync,
            ..JournalOptions::default()
        },
    )?;

    // One echo tool for every session, as one process serving many sessions would hold
    // it (the raw loop likewise shares its tool definition).
    let echo: Arc<dyn Tool> = Arc::new(
        FnTool::new("echo", "Returns its argument.", |a: Echo| async move {
            Ok::<_, ToolError>(a.i.to_string())
        })
        .effect(if args.effectful {
            Effect::Effectful
        } else {
            Effect::Pure
        }),
    );
    let mut sessions = Vec::with_capacity(args.sessions);
    for _ in 0..args.sessions {
        let session = Session::builder()
            .endpoint(&args.endpoint)
            .model(&args.model)
            .journal(journal.clone())
            .max_steps(args.steps + 2)
            // Long runs (`--steps 1000`) must not meet the default per-turn call limit.
            .max_tool_calls_per_turn(args.steps + 2)
            .tools([echo.clone()])
            .start()
            .await?;
        sessions.push(session);
    }

    // The syncs of the turns only: the sessions' starts and shutdowns above and below
    // append one at a time, which at 5 x 1,000 was most of the batches.
    let batches_before = journal.stats().batches;
    let (started, cpu) = (Instant::now(), cpu_time());
    // Each run is a task of its own, as a server's requests are: on the multi-threaded
    // runtime `block_on`'s future runs on the main thread, not on a worker, so awaiting
    // the runs here would add a thread hand-over to every exchange with the sessions.
    let runs = sessions.iter().map(|s| {
        let s = s.clone();
        tokio::spawn(async move { s.turn("Call echo until told to stop.").run().await })
    });
    let reports = futures::future::join_all(runs).await;
    let (wall, cpu) = (started.elapsed(), cpu_time().saturating_sub(cpu));
    let turn_batches = journal.stats().batches - batches_before;

    for report in reports {
        let report = report??;
        // K tool steps plus the final text step.
        if !report.is_done() || report.steps != args.steps + 1 {
            return Err(format!("a session ended badly: {report:?}").into());
        }
    }
    let mut line = figures("treadle", args, wall, cpu);
    if args.exit_idle {
        println!("{line}");
        std::process::exit(0);
    }
    // What the sessions hold between turns: the live heap with them idle, less the live
    // heap once they are shut down and dropped (the journal and pooled connections stay).
    let idle_heap = heap::live_bytes();
    for session in &sessions {
        session.shutdown().await;
    }
    drop(sessions);
    let gone_heap = heap::live_bytes();
    let stats = journal.stats();
    let syncs = probe::wal_appends_us(dir.path(), 50);
    line["log_syncs_per_step"] =
        serde_json::json!(turn_batches as f64 / ((args.steps as f64 + 1.0) * args.sessions as f64));
    line["journal_mean_log_sync_us"] =
        serde_json::json!(stats.log_append_micros as f64 / stats.batches.max(1) as f64);
    line["probe_log_sync_median_us"] = serde_json::json!(probe::median(syncs));
    if heap::counting() {
        line["heap_per_idle_session_kb"] = serde_json::json!(
            idle_heap.saturating_sub(gone_heap) as f64 / 1024.0 / args.sessions as f64
        );
    }
    Ok(line)
}

/// CPU time of the whole process so far (every thread, user and system), so that a
/// driver's CPU per step covers the timed turns only, not its start or its probes.
pub fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
