//! Two handles on one journal: a clone drives the same session, and a restore of the
//! session while a handle of it is live is refused (one writer per session, rule 1). After
//! the last handle is dropped (or `shutdown().await`), the same restore succeeds.
//!
//! `main` returns with both handles live: dropping them stops the session as
//! `shutdown().await` would, so the journal ends with `SessionStopped`.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example two_handles
//! ```

use treadle_session::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let journal = std::env::temp_dir().join(format!("two-{}.redb", std::process::id()));
    println!("journal: {}", journal.display());
    let session = SessionBuilder::from_env()
        .journal_path(&journal)
        .start()
        .await?;
    let other = session.clone();
    println!("answer: {}", other.turn("Name a colour.").answer().await?);

    let again = SessionBuilder::from_env()
        .journal_path(&journal)
        .restore(session.id())
        .await;
    match again {
        Err(RestoreError::Live { session: id }) => println!("refused: {id} is live"),
        other => println!("not refused: {:?}", other.map(|s| s.id())),
    }
    Ok(())
}
