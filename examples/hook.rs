//! A hook plugin that logs every operation of a session and denies one tool, and a
//! permission gate (opened by the hook's `ask`) answered in code.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 OPENAI_MODEL=qwen2.5-coder-0.5b cargo run --example hook
//! ```

use treadle_session::prelude::*;

/// Logs each operation as it begins and ends, refuses `delete_file` and asks before
/// `write_file`. Its name in logs and denials defaults to "Audit".
struct Audit;

#[async_trait]
impl Hook for Audit {
    async fn begin(&self, call: &HookCall) -> Decision {
        let tool = call.payload.tool_name().unwrap_or("");
        eprintln!("[audit] {} {tool} begins", call.op.name());
        match tool {
            _ if call.op != Operation::ToolCall => Decision::Allow,
            "delete_file" => Decision::deny("this session may not delete files"),
            "write_file" => Decision::ask("write a file?"),
            _ => Decision::Allow,
        }
    }

    async fn finish(&self, call: &HookCall, outcome: &OperationOutcome, _: Option<&Json>) {
        let tool = call.payload.tool_name().unwrap_or("");
        eprintln!("[audit] {} {tool} ends: {}", call.op.name(), outcome.name());
    }
}

#[schema]
struct PathArg {
    /// The file to act on.
    path: String,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let done = |verb: &'static str| move |a: PathArg| format!("{verb} {}", a.path);
    let session = SessionBuilder::from_env()
        .hook(Audit)
        .tool(FnTool::plain(
            "delete_file",
            "Deletes a file.",
            done("deleted"),
        ))
        .tool(FnTool::plain("write_file", "Writes a file.", done("wrote")))
        // Every gate is answered here, in code: writing is approved.
        .on_gate(|question| async move {
            eprintln!("[gate] {} asks: {}", question.tool, question.reason);
            GateAnswer::Approve
        })
        .start()
        .await?;
    let prompt = "Delete notes.txt with delete_file, then write todo.txt with write_file.";
    println!("{}", session.turn(prompt).answer().await?);
    Ok(())
}
