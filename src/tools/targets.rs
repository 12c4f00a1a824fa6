//! The file a built-in file tool's call writes, declared to the session's batch planner
//! ([`Tool::write_target`]) so that calls of one batch that write the same file never run
//! at the same time.
//!
//! `write_file` and `edit_file` write the file their `path` names. The target is the path
//! as the workspace resolves it, so `a.txt`, `./a.txt` and `dir/../a.txt` (or a path
//! through a symlink) are one target and their calls run one after another. (FnTool's own
//! `write_target_arg` compares the raw text, which would let those spellings race.)
//! `run_shell` may write anything, so it is an FnTool marked `sequential` (see `shell`);
//! the read-only tools write nothing and run in parallel with anything.

use std::sync::Arc;

use treadle_session::{Tool, ToolError};

use super::Workspace;

/// A built-in file tool whose write target is its resolved `path` argument.
pub(super) struct Declared {
    inner: Arc<dyn Tool>,
    ws: Workspace,
}

impl Declared {
    pub(super) fn new(inner: impl Tool, ws: Workspace) -> Self {
        Self {
            inner: Arc::new(inner),
            ws,
        }
    }
}

#[async_trait::async_trait]
impl Tool for Declared {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> serde_json::Value {
        self.inner.parameters()
    }
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        self.inner.call(arguments).await
    }
    fn sequential(&self) -> bool {
        self.inner.sequential()
    }
    fn effect(&self) -> treadle_session::Effect {
        self.inner.effect()
    }
    fn human_question(
        &self,
        arguments: &serde_json::Value,
    ) -> Option<(treadle_session::HumanQuestion, Option<std::time::Duration>)> {
        self.inner.human_question(arguments)
    }
    fn write_target(&self, arguments: &serde_json::Value) -> Option<String> {
        let path = arguments.get("path")?.as_str()?;
        // A path the workspace refuses is refused by the call too; its raw text is target
        // enough to keep two such calls in order.
        let target = match self.ws.resolve(path) {
            Ok(resolved) => resolved.to_string_lossy().into_owned(),
            Err(_) => path.to_owned(),
        };
        Some(format!("file:{target}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Workspace, grant};

    #[test]
    fn file_tools_declare_the_resolved_path_and_the_shell_runs_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let tools = grant(&["write_file", "edit_file", "run_shell", "read_file"], &ws).unwrap();
        let (write, edit, shell, read) = (&tools[0], &tools[1], &tools[2], &tools[3]);
        let a = write.write_target(&json!({"path": "a.txt", "content": ""}));
        assert!(a.is_some());
        assert_eq!(a, write.write_target(&json!({"path": "./sub/../a.txt"})));
        assert_eq!(a, edit.write_target(&json!({"path": "a.txt"})));
        assert_ne!(a, write.write_target(&json!({"path": "b.txt"})));
        assert!(shell.sequential());
        assert!(!write.sequential() && !read.sequential());
        assert_eq!(read.write_target(&json!({"path": "a.txt"})), None);
    }
}
