//! The `treadle-scripted` binary: serves the echo workload or a JSON script on loopback
//! until killed, printing the base URL as its first stdout line.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use treadle_scripted::{Script, ScriptedServer};

/// Scripted OpenAI-compatible chat-completions server on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "treadle-scripted", version)]
struct Args {
    /// Echo workload: `echo` tool calls until K tool results are in the conversation, then "done".
    #[arg(long, value_name = "K", conflicts_with = "script")]
    echo_until: Option<usize>,
    /// A JSON list of replies (see `Script::from_json`).
    #[arg(long, value_name = "FILE")]
    script: Option<std::path::PathBuf>,
    /// Loopback port; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Delay between streamed chunks, in milliseconds.
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
    /// Send provider quirks (finish_reason "", no usage, unknown fields).
    #[arg(long)]
    quirks: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let script = match (&args.echo_until, &args.script) {
        (Some(k), _) => Script::echo_until(*k),
        (None, Some(path)) => {
            let loaded = std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|text| Script::from_json(&text).map_err(|e| e.to_string()));
            match loaded {
                Ok(script) => script,
                Err(e) => {
                    eprintln!("treadle-scripted: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
        (None, None) => {
            eprintln!("treadle-scripted: give --echo-until K or --script FILE");
            return ExitCode::from(2);
        }
    };
    let server = ScriptedServer::builder()
        .port(args.port)
        .chunk_delay(Duration::from_millis(args.chunk_delay_ms))
        .quirks(args.quirks)
        .record(false)
        .start(script)
        .await;
    let server = match server {
        Ok(s) => s,
        Err(e) => {
            eprintln!("treadle-scripted: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", server.base_url())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(2);
    }
    drop(out);
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("treadle-scripted: cannot wait for Ctrl-C: {e}");
        std::future::pending::<()>().await;
    }
    ExitCode::SUCCESS
}
