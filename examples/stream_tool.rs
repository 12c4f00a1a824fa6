//! Streams one turn in which the model may call a custom tool: text as it arrives, each
//! tool call's result, then the answer (or why there is none).
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example stream_tool
//! ```
//!
//! Only `treadle-session` and `tokio` are dependencies: `#[schema]` derives the argument
//! type through treadle-session's serde and schemars.

use treadle_session::prelude::*;

#[schema]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let add = FnTool::plain("add", "Adds two integers.", |x: Add| x.a + x.b);
    let session = SessionBuilder::from_env().tool(add).start().await?;
    let mut turn = session.turn("What is 2 + 3?").stream().await?;
    while let Some(item) = turn.next().await.transpose()? {
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
