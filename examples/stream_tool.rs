//! Streams one turn in which the model may call a custom tool: text as it arrives, each
//! tool call's result, then the answer (or why there is none).
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example stream_tool -- "What is 2 + 3?"
//! ```

use std::io::Write;

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::event::{DeltaKind, EventKind};
use treadle_session::{FnTool, Session, TurnItem};

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "What is 2 + 3?".into());
    let session = Session::builder()
        .endpoint(endpoint)
        .model("qwen2.5-coder-0.5b")
        .tool(FnTool::plain("add", "Adds two integers.", |x: Add| {
            x.a + x.b
        }))
        .start()
        .await?;
    let mut turn = session.stream(prompt).await?;
    while let Some(item) = turn.next().await {
        match item? {
            TurnItem::Event(event) => match &event.kind {
                EventKind::TokenDelta {
                    kind: DeltaKind::Text,
                    text,
                    ..
                } => {
                    print!("{text}");
                    std::io::stdout().flush()?;
                }
                EventKind::ToolCallCompleted { name, content, .. } => {
                    println!("[{name} -> {content}]");
                }
                _ => {}
            },
            // A failed or interrupted turn is an error here, never printed as an answer.
            TurnItem::End(report) => println!("\nanswer: {}", report.answer()?),
        }
    }
    session.shutdown().await;
    Ok(())
}
