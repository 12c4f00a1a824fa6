//! A session restored from its journal after its last handle was dropped.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example restore
//! ```
//!
//! The first session answers one input and is dropped, which stops it and journals
//! `SessionStopped`. A second builder restores it by id from the same journal: its history
//! is exactly what was committed, and the model is asked nothing again.

use treadle_session::SessionBuilder;

#[tokio::main]
async fn main() -> Result<(), treadle_session::Error> {
    let journal = std::env::temp_dir().join(format!("restore-{}.redb", std::process::id()));
    let first = SessionBuilder::from_env()
        .journal_path(&journal)
        .start()
        .await?;
    let id = first.id();
    println!("answer: {}", first.answer("Name a colour.").await?);
    drop(first); // the last handle: the session stops and releases the journal

    let restored = SessionBuilder::from_env()
        .journal_path(&journal)
        .restore(id)
        .await?;
    println!("history: {} messages", restored.history().await?.len());
    for (seq, event) in restored.journal().read(id, 1, None)? {
        println!("#{seq} {}", event.kind.name());
    }
    Ok(())
}
