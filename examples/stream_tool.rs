//! Streams one turn in which the model may call a custom tool: text as it arrives, each
//! tool call's result, then the answer (or why there is none).
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example stream_tool -- "What is 2 + 3?"
//! ```
//!
//! Only `treadle-session` and `tokio` are dependencies: serde and schemars come through
//! treadle-session, which the two `crate = ...` attributes tell the derives.

use treadle_session::schemars::JsonSchema;
use treadle_session::serde::Deserialize;
use treadle_session::{Effect, FnTool, SessionBuilder};

#[derive(Deserialize, JsonSchema)]
#[serde(crate = "treadle_session::serde")]
#[schemars(crate = "treadle_session::schemars")]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), treadle_session::Error> {
    let prompt = std::env::args().nth(1).unwrap_or("What is 2 + 3?".into());
    let add = FnTool::plain("add", "Adds two integers.", |x: Add| x.a + x.b);
    let session = SessionBuilder::from_env()
        .tool(add.effect(Effect::Pure))
        .start()
        .await?;
    let mut turn = session.stream(prompt).await?;
    while let Some(item) = turn.next().await {
        let item = item?;
        if let Some(text) = item.text_delta() {
            print!("{text}");
        }
        if let Some(result) = item.tool_result() {
            println!("[{} -> {}]", result.name, result.content);
        }
        if let Some(report) = item.report() {
            // A failed or interrupted turn is an error here, never printed as an answer.
            println!("\nanswer: {}", report.answer()?);
        }
    }
    Ok(())
}
