//! A person at the terminal approves or denies a tool call through a permission gate.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example gate -- "Write hi to a.txt"
//! ```
//!
//! A [`Policy`] guard allows `read_file`, asks about `write_file` and denies the rest. When
//! the model calls `write_file`, the session journals the gate and hands the typed question to
//! the `on_gate` handler, which asks on the terminal: `y` approves once, `a` approves
//! `write_file` for the rest of the session, anything else denies.

use treadle_session::prelude::*;

#[schema]
struct WriteArgs {
    /// The file to write.
    path: String,
    /// What to write into it.
    content: String,
}

#[schema]
struct ReadArgs {
    /// The file to read.
    path: String,
}

/// Asks on the terminal (on a blocking thread, so the runtime keeps running).
async fn ask(question: GateQuestion) -> GateAnswer {
    println!(
        "\n{} {}: {}",
        question.tool, question.arguments, question.reason
    );
    println!("[y]es / [n]o / [a]lways for this tool?");
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    match line.map(|l| l.map(|l| l.trim().to_ascii_lowercase())) {
        Ok(Ok(answer)) if answer.starts_with('y') => GateAnswer::Approve,
        Ok(Ok(answer)) if answer.starts_with('a') => GateAnswer::ApproveAlways,
        _ => GateAnswer::deny("the user said no"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Write 'hello' to notes.txt with the write_file tool.".into());
    let policy = Policy::new()
        .allow("read_file")
        .ask("write_file")
        .default_action(Action::deny("only read_file and write_file exist"));
    let session = SessionBuilder::from_env()
        .hook(policy)
        .on_gate(ask)
        // The tools only pretend, so the example is safe to run anywhere.
        .tool(FnTool::plain(
            "write_file",
            "Writes a file.",
            |a: WriteArgs| format!("wrote {} bytes to {}", a.content.len(), a.path),
        ))
        .tool(FnTool::plain(
            "read_file",
            "Reads a file.",
            |a: ReadArgs| format!("{} is empty", a.path),
        ))
        .start()
        .await?;
    let report = session.turn(prompt).run().await?;
    println!("\n{:?}", report.outcome);
    Ok(())
}
