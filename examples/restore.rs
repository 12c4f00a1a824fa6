//! A session taken up again after its process was killed: run it once, kill it (SIGKILL)
//! while the model answers, then run it again with the session id it printed.
//!
//! ```text
//! export OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b
//! cargo run --example restore            # prints "session <id>"; kill -9 it
//! cargo run --example restore -- <id>    # the same session, from its journal
//! ```
//!
//! The journal holds exactly what was committed before the kill: the restore closes the
//! turn the kill cut short (`TurnInterrupted`), and the same question is asked again.

use treadle_session::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let builder = SessionBuilder::from_env().journal_path("restore.redb");
    let session = match std::env::args().nth(1) {
        Some(id) => builder.restore(id.parse()?).await?,
        None => builder.start().await?,
    };
    println!("session {}", session.id());
    println!("answer: {}", session.turn("Name a colour.").answer().await?);
    Ok(())
}
