//! One prompt, one answer: the smallest program.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example one_prompt
//! ```
//!
//! Returning from `main` drops the last handle, which stops the session cleanly
//! (`SessionStopped` is journaled) in the default multi-threaded runtime. An error returned
//! from `main` prints its message (a missing `OPENAI_BASE_URL` says so).

use treadle_session::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let session = SessionBuilder::from_env().start().await?;
    println!("{}", session.turn("Name a colour.").answer().await?);
    Ok(())
}
