//! A session in its own process, for the restore-exact proof to kill with SIGKILL.
//!
//! Usage: `treadle-crash-child ENDPOINT JOURNAL SEED`. It starts a session on JOURNAL,
//! prints `session <id>`, then submits inputs one after another forever, printing
//! `seq <n> <event>` for every enduring event as it is published. Its `echo` tool sleeps a
//! seeded random while, so a kill lands mid-stream, mid-tool or mid-commit.

use std::io::Write;

use treadle_event::EventFilter;
use treadle_proofs::echo_tool;
use treadle_session::Session;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(endpoint), Some(journal), Some(seed)) = (args.next(), args.next(), args.next())
    else {
        return Err("usage: treadle-crash-child ENDPOINT JOURNAL SEED".into());
    };
    let session = Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal_path(journal)
        .tool(echo_tool(seed.parse()?))
        .start()
        .await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "session {}", session.id())?;
    stdout.flush()?;

    let mut events = session.subscribe(EventFilter::enduring_only());
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        while let Some(Ok(delivery)) = events.next().await {
            let seq = delivery.journal_seq.unwrap_or_default();
            let _ = writeln!(stdout, "seq {seq} {}", delivery.event.kind.name());
            let _ = stdout.flush();
        }
    });
    for n in 0.. {
        session.turn(format!("question {n}")).run().await?;
    }
    printer.abort();
    Ok(())
}
