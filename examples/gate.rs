//! A person at the terminal approves or denies a tool call through a permission gate.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example gate
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example gate -- "Write hi to a.txt"
//! ```
//!
//! A [`Policy`] guard allows `read_file`, asks about `write_file` and denies the rest. When
//! the model calls `write_file`, the session journals `GateOpened` and the call waits; this
//! program sees the event on its subscription, asks on the terminal, and answers with
//! [`Session::respond_gate`]: `y` approves once, `a` approves `write_file` for the rest of
//! the session, anything else denies. Unanswered gates deny after two minutes.

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::event::{EventFilter, EventKind};
use treadle_session::hook::{Action, Policy};
use treadle_session::{FnTool, GateAnswer, Session, ToolError};

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file to write.
    path: String,
    /// What to write into it.
    content: String,
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// The file to read.
    path: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "qwen2.5-coder-0.5b".into());
    let prompt = std::env::args().nth(1).unwrap_or_else(|| {
        "Write the text 'hello' to the file notes.txt with the write_file tool.".into()
    });
    let policy = Policy::new()
        .allow("read_file")
        .ask("write_file")
        .default_action(Action::Deny(
            "only read_file and write_file are available".into(),
        ));
    let session = Session::builder()
        .endpoint(endpoint)
        .model(model)
        .hook(policy)
        .gate_deadline(Duration::from_secs(120))
        // The tools only pretend, so the example is safe to run anywhere.
        .tool(FnTool::new(
            "write_file",
            "Writes content to a file.",
            |a: WriteArgs| async move {
                Ok::<_, ToolError>(format!("wrote {} bytes to {}", a.content.len(), a.path))
            },
        ))
        .tool(FnTool::new(
            "read_file",
            "Reads a file.",
            |a: ReadArgs| async move { Ok::<_, ToolError>(format!("{} is empty", a.path)) },
        ))
        .start()
        .await?;

    // Subscribe before submitting, so no GateOpened can slip past.
    let mut events = session.subscribe(EventFilter::enduring_only());
    let asker = session.clone();
    let gates = tokio::spawn(async move {
        while let Some(Ok(delivery)) = events.next().await {
            let EventKind::GateOpened {
                gate,
                question,
                subject,
            } = &delivery.event.kind
            else {
                continue;
            };
            print!(
                "\n{question}\n  calls: {}\n[y]es / [n]o / [a]lways for this tool? ",
                subject["calls"]
            );
            let _ = std::io::stdout().flush();
            // The terminal is read on a blocking thread, so the runtime keeps streaming.
            let line = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .map(|read| (read, line))
            })
            .await;
            let response = match line {
                Ok(Ok((read, line))) if read > 0 => match line.trim().to_ascii_lowercase().as_str()
                {
                    "y" | "yes" => GateAnswer::Approve,
                    "a" | "always" => GateAnswer::ApproveAlways,
                    _ => GateAnswer::deny("the user said no"),
                },
                _ => GateAnswer::deny("nobody is at the terminal (stdin closed)"),
            };
            if let Err(error) = asker.respond_gate(*gate, response).await {
                eprintln!("could not answer the gate: {error}");
            }
        }
    });

    let report = session.run(prompt).await?;
    println!("\n{}", report.text());
    session.shutdown().await;
    let _ = gates.await;
    Ok(())
}
