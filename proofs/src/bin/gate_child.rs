//! A session in its own process that parks on a permission gate, for the gate-survival
//! proof to kill with SIGKILL.
//!
//! Usage: `treadle-gate-child ENDPOINT JOURNAL LOG DEADLINE_MS APPROVE_FIRST`. It starts a
//! session on JOURNAL whose policy allows `echo` and asks about `write` (gates wait
//! DEADLINE_MS), and whose `write` appends a line to LOG per execution. It prints
//! `session <id>` and submits one input. It approves the first APPROVE_FIRST gates itself;
//! for each later `GateOpened` (journaled, then published) it prints `gate <id>` and leaves
//! it open: the parent kills this process while that gate is open.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use treadle_event::{EventFilter, EventKind};
use treadle_hook::Policy;
use treadle_proofs::{echo_tool, line_counting_write};
use treadle_session::{GateAnswer, Session};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(endpoint), Some(journal), Some(log), Some(deadline), Some(approve_first)) = (
        args.next(),
        args.next(),
        args.next(),
        args.next(),
        args.next(),
    ) else {
        return Err(
            "usage: treadle-gate-child ENDPOINT JOURNAL LOG DEADLINE_MS APPROVE_FIRST".into(),
        );
    };
    let mut approve_first: usize = approve_first.parse()?;
    let session = Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal_path(journal)
        .hook(Policy::new().allow("echo").ask("write"))
        .gate_deadline(Duration::from_millis(deadline.parse()?))
        .tool(echo_tool(0))
        .tool(line_counting_write(PathBuf::from(log)))
        .start()
        .await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "session {}", session.id())?;
    stdout.flush()?;

    // Subscribed before the submit, so the GateOpened cannot slip past.
    let mut events = session.subscribe(EventFilter::enduring_only());
    session.turn("write a.md").submit().await?;
    while let Some(Ok(delivery)) = events.next().await {
        if let EventKind::GateOpened { gate, .. } = delivery.event.kind {
            if approve_first > 0 {
                approve_first -= 1;
                session.respond_gate(gate, GateAnswer::Approve).await?;
                continue;
            }
            writeln!(stdout, "gate {gate}")?;
            stdout.flush()?;
        }
    }
    Ok(())
}
