//! A hook plugin: logs every operation of a session and denies one tool.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8091/v1 cargo run --example hook
//! ```
//!
//! Writing a plugin is implementing [`Hook`]: `begin` may deny a turn, an inference or a
//! tool call; `finish` sees how every operation ended.

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::hook::{Decision, Hook, HookCall, Operation, Outcome, Payload};
use treadle_session::{FnTool, Session, ToolError};

/// Logs each operation as it begins and ends, and refuses `delete_file`.
struct AuditHook;

#[treadle_session::async_trait]
impl Hook for AuditHook {
    fn name(&self) -> &str {
        "audit"
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        eprintln!("[audit] {} begins", describe(call));
        match &call.payload {
            Payload::ToolCall { name, .. } if name == "delete_file" => {
                Decision::deny("this session may not delete files")
            }
            _ => Decision::Allow,
        }
    }

    async fn finish(
        &self,
        call: &HookCall,
        outcome: &Outcome,
        _output: Option<&serde_json::Value>,
    ) {
        eprintln!("[audit] {} ends: {}", describe(call), outcome.name());
    }
}

fn describe(call: &HookCall) -> String {
    match (&call.op, call.payload.tool_name()) {
        (Operation::ToolCall | Operation::ToolExecution, Some(tool)) => {
            format!("{} {tool}", call.op.name())
        }
        (op, _) => op.name().to_owned(),
    }
}

#[derive(Deserialize, JsonSchema)]
struct PathArg {
    /// The file to act on.
    path: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "http://127.0.0.1:8091/v1".into());
    let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "qwen2.5-coder-0.5b".into());
    let session = Session::builder()
        .endpoint(endpoint)
        .model(model)
        .hook(AuditHook)
        .tool(FnTool::new(
            "delete_file",
            "Deletes a file.",
            |a: PathArg| async move { Ok::<_, ToolError>(format!("deleted {}", a.path)) },
        ))
        .start()
        .await?;
    let report = session
        .run("Delete the file notes.txt with the delete_file tool.")
        .await?;
    println!("{:?}", report.answer());
    session.shutdown().await;
    Ok(())
}
