//! Restores a session from its journal and replays what it recorded.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example restore
//! ```
//!
//! The first session answers one input and is dropped (which stops it). A second builder
//! restores it by id from the same journal: the history is exactly what was committed, and
//! `subscribe_from(1)` yields every enduring event with its journal seq, then says when it
//! has caught up (after the `session_restored` mark the restore journaled).

use futures::StreamExt;
use treadle_session::event::EventFilter;
use treadle_session::{CatchUpItem, Session};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let dir = tempfile::tempdir()?;
    let builder = || {
        Session::builder()
            .endpoint(endpoint.clone())
            .model("qwen2.5-coder-0.5b")
            .journal_path(dir.path().join("journal.redb"))
    };

    let first = builder().start().await?;
    let id = first.id();
    println!("answer: {:?}", first.run("Name a colour.").await?.answer());
    drop(first); // the last handle: the session stops and releases the journal

    let restored = builder().restore(id).await?;
    println!("history: {} messages", restored.history().await?.len());
    let mut journaled = restored.subscribe_from(1, EventFilter::enduring_only())?;
    while let Some(item) = journaled.next().await {
        match item? {
            CatchUpItem::Delivery(d) => println!("#{:?} {}", d.journal_seq, d.event.kind.name()),
            CatchUpItem::CaughtUp { seq } => {
                println!("caught up at #{seq}");
                break;
            }
        }
    }
    Ok(())
}
