//! A session in its own process that runs an effectful call, for the exactly-once-effects
//! proof to kill with SIGKILL between the call's intent and its result.
//!
//! Usage: `treadle-effect-child ENDPOINT JOURNAL LOG`. It starts a session on JOURNAL with
//! a pure `echo` and an effectful `charge` that appends a line to LOG per execution (after
//! 15 ms, then takes 80 ms more to return), prints `session <id>`, submits one input, and
//! prints `intent` once the `charge` call's `EffectIntent` is journaled and published.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use treadle_event::{EventFilter, EventKind};
use treadle_proofs::{charge_tool, echo_tool};
use treadle_session::Session;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(endpoint), Some(journal), Some(log)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: treadle-effect-child ENDPOINT JOURNAL LOG".into());
    };
    let session = Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal_path(journal)
        .tool(echo_tool(0))
        .tool(charge_tool(
            PathBuf::from(log),
            Duration::from_millis(15),
            Duration::from_millis(80),
        ))
        .start()
        .await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "session {}", session.id())?;
    stdout.flush()?;

    // Subscribed before the submit, so the intent cannot slip past.
    let mut events = session.subscribe(EventFilter::enduring_only());
    session.turn("charge 5").submit().await?;
    while let Some(Ok(delivery)) = events.next().await {
        if let EventKind::EffectIntent { name, .. } = &delivery.event.kind
            && name == "charge"
        {
            writeln!(stdout, "intent")?;
            stdout.flush()?;
        }
    }
    Ok(())
}
