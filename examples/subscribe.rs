//! Streams one turn from any OpenAI-compatible endpoint and prints what a subscriber sees.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example subscribe -- "Say hi"
//! ```
//!
//! `OPENAI_MODEL` picks the model (default `qwen2.5-coder-0.5b`, the local model);
//! `OPENAI_API_KEY` is sent when it is set.

use std::io::Write;

use futures::StreamExt;
use treadle_session::Session;
use treadle_session::event::{DeltaKind, EventFilter, EventKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "qwen2.5-coder-0.5b".into());
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Say hello in five words.".into());

    let mut builder = Session::builder().endpoint(endpoint).model(model);
    if std::env::var_os("OPENAI_API_KEY").is_some() {
        builder = builder.api_key_env("OPENAI_API_KEY");
    }
    let session = builder.start().await?;

    // Subscribe before submitting: a live subscription has no replay.
    let mut events = session.subscribe(EventFilter::all());
    session.submit(prompt).await?;
    while let Some(delivery) = events.next().await {
        let delivery = delivery?;
        let seq = delivery
            .journal_seq
            .map(|s| format!("#{s}"))
            .unwrap_or_default();
        match &delivery.event.kind {
            EventKind::TokenDelta {
                kind: DeltaKind::Text,
                text,
                ..
            } => {
                print!("{text}");
                std::io::stdout().flush()?;
            }
            EventKind::StepDone { index, usage, .. } => {
                println!(
                    "\n[step {index} done {seq}: {} prompt + {} completion tokens]",
                    usage.prompt_tokens, usage.completion_tokens
                );
            }
            EventKind::TurnDone { steps, .. } => {
                println!("[turn done {seq} after {steps} steps]");
                break;
            }
            EventKind::TurnFailed { error, .. } => {
                println!("[turn failed {seq}: {error}]");
                break;
            }
            EventKind::TurnInterrupted { reason, .. } => {
                println!("[turn interrupted {seq}: {reason}]");
                break;
            }
            _ => {}
        }
    }
    session.shutdown().await;
    Ok(())
}
