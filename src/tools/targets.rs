//! What a built-in tool's call touches, declared to the session's batch planner
//! ([`Tool::touches`]) so that calls of one batch that touch the same file run in the
//! model's order, and the rest in parallel.
//!
//! * `read_file`, `list_dir` and `search_files` read the path their `path` names (the step
//!   directory when they name none); `write_file` and `edit_file` write it.
//! * `run_shell` may read and write anything in the step directory, so it writes the whole
//!   directory: it waits for every file call before it, and the file calls after it wait
//!   for it.
//! * `web_fetch` and `ask_human` touch no file (see `mod.rs`).
//!
//! A place is the path as the workspace resolves it, so `a.txt`, `./a.txt` and
//! `dir/../a.txt` (or a path through a symlink) are one place, and a directory holds what
//! is under it: a write of `src/a.rs` and a listing of `src` are ordered.

use std::sync::Arc;

use treadle_session::{Footprint, Place, Tool, ToolError};

use super::Workspace;

/// How a tool's call touches the step directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Reads its `path` argument (the step directory without one).
    ReadsPath,
    /// Writes its `path` argument.
    WritesPath,
    /// May write anything in the step directory.
    WritesAll,
}

/// A built-in tool whose footprint is its resolved `path` argument, or the step directory.
pub(super) struct Declared {
    inner: Arc<dyn Tool>,
    ws: Workspace,
    access: Access,
}

impl Declared {
    pub(super) fn new(inner: impl Tool, ws: Workspace, access: Access) -> Self {
        Self {
            inner: Arc::new(inner),
            ws,
            access,
        }
    }

    fn place(&self, path: &str) -> Place {
        place_of(&self.ws, path)
    }
}

/// The place of the file or directory `path` (relative to the step directory) names:
/// resolved, or (a path the workspace refuses, which a call refuses too) its raw text,
/// enough to keep two such calls in order.
pub(crate) fn place_of(ws: &Workspace, path: &str) -> Place {
    match ws.resolve(path) {
        Ok(resolved) => file_place(&resolved),
        Err(_) => Place::new(format!("file:{path}")),
    }
}

/// The place of a file or directory.
fn file_place(path: &std::path::Path) -> Place {
    Place::new(format!("file:{}", path.to_string_lossy()))
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
    fn effect(&self) -> treadle_session::Effect {
        self.inner.effect()
    }
    fn human_question(
        &self,
        arguments: &serde_json::Value,
    ) -> Option<(treadle_session::HumanQuestion, Option<std::time::Duration>)> {
        self.inner.human_question(arguments)
    }
    fn touches(&self, arguments: &serde_json::Value) -> Footprint {
        let path = arguments.get("path").and_then(|p| p.as_str());
        match (self.access, path) {
            (Access::WritesAll, _) => Footprint::writes(file_place(self.ws.root())),
            (Access::ReadsPath, path) => Footprint::reads(self.place(path.unwrap_or("."))),
            (Access::WritesPath, Some(path)) => Footprint::writes(self.place(path)),
            // Without a path the call is refused by its schema; the directory is safe.
            (Access::WritesPath, None) => Footprint::writes(file_place(self.ws.root())),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use treadle_session::Footprint;

    use super::super::{Workspace, grant};

    #[test]
    fn file_tools_declare_the_resolved_path_and_the_shell_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let names = [
            "write_file",
            "edit_file",
            "run_shell",
            "read_file",
            "list_dir",
            "web_fetch",
        ];
        let tools = grant(&names, &ws).unwrap();
        let [write, edit, shell, read, list, fetch] = &tools[..] else {
            panic!("six tools");
        };
        let a = write.touches(&json!({"path": "a.txt", "content": ""}));
        assert!(a.writes_anything());
        assert_eq!(a, write.touches(&json!({"path": "./sub/../a.txt"})));
        assert_eq!(a, edit.touches(&json!({"path": "a.txt"})));
        assert!(!a.conflicts(&write.touches(&json!({"path": "b.txt"}))));
        let read_a = read.touches(&json!({"path": "a.txt"}));
        assert!(!read_a.writes_anything() && read_a.conflicts(&a));
        assert!(!read_a.conflicts(&read.touches(&json!({"path": "a.txt"}))));
        assert!(
            list.touches(&json!({})).conflicts(&a),
            "a listing sees a new file"
        );
        let sh = shell.touches(&json!({"command": "true"}));
        assert!(sh.conflicts(&read_a) && sh.conflicts(&a));
        assert_eq!(
            fetch.touches(&json!({"url": "http://x"})),
            Footprint::nothing()
        );
    }
}
