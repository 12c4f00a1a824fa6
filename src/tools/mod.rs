//! Built-in tools an agent step may be granted, each confined to the step's directory.
//!
//! | tool | does | grant |
//! |---|---|---|
//! | `read_file` | reads a text file, optionally a range of lines | default |
//! | `list_dir` | lists a directory | default |
//! | `search_files` | searches files for a regex, ripgrep-style (honours `.gitignore`) | default |
//! | `write_file` | creates or replaces a file, creating parent directories | opt-in |
//! | `edit_file` | replaces text that occurs exactly once in a file | opt-in |
//! | `run_shell` | runs `sh -c` in the step directory with a timeout | opt-in |
//! | `ask_human` | asks a person a question; the answer must fit a JSON schema | opt-in |
//! | `web_fetch` | HTTP GET of a URL, text only, optionally fenced to hosts | opt-in |
//!
//! Every tool's arguments, footprint, limits and an example call are on the page
//! docs/tools.md (`treadle docs tools`), generated from the tools by `reference.rs`.
//!
//! A pipeline's own command-backed tools (`crate::agent`'s custom tools) run their commands
//! through [`execute`], exactly like `run_shell`.
//!
//! Every path goes through [`Workspace::resolve`], which refuses absolute paths, `..`
//! escapes and symlinks that lead out of the step directory. A refusal, like every other
//! failure of a call, is a [`ToolError`](treadle_session::ToolError) whose message the model
//! reads as the call's result: the turn goes on and the model can correct itself.
//!
//! Decisions made here:
//! * Outputs are cut at [`MAX_OUTPUT_BYTES`] with a note that says how much was left out
//!   and how to see the rest, so one large file cannot fill a model's context.
//! * File work runs on tokio's blocking pool; a search over a large input tree would
//!   otherwise stall the runtime's worker threads.
//! * The default grant is read-only: an agent changes files only when its pipeline says so.
//! * Each tool declares what its calls read and write (`targets.rs`), so calls of one batch
//!   that touch the same file run in the model's order (a read sent after an edit reads the
//!   edited text), `run_shell` is ordered with every file call (it may touch any file of
//!   the step directory), and the rest run in parallel.

mod files;
mod masked;
mod output;
pub mod reference;
mod search;
mod shell;
mod targets;
mod web_fetch;
mod workspace;

use std::sync::Arc;

use treadle_session::Tool;

use crate::blocking::{WorkerStopped, blocking};

use targets::{Access, Declared};

pub use masked::Masked;
pub use output::{MAX_OUTPUT_BYTES, truncate};
pub use shell::{Ran, describe as describe_exit, execute};
pub(crate) use targets::place_of;
pub use web_fetch::{Fence, MAX_BODY_BYTES};
pub use workspace::{PathError, Workspace, WorkspaceError};

/// The names of every built-in tool, in the order they are documented.
pub const BUILTIN: [&str; 8] = [
    "read_file",
    "list_dir",
    "search_files",
    "write_file",
    "edit_file",
    "run_shell",
    "ask_human",
    "web_fetch",
];

/// The tools an agent gets when its definition names none: the read-only ones.
pub const DEFAULT_GRANT: [&str; 3] = ["read_file", "list_dir", "search_files"];

/// A grant named a tool that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool {name:?}; the built-in tools are: {}", BUILTIN.join(", "))]
pub struct UnknownTool {
    /// The name as the pipeline wrote it.
    pub name: String,
}

/// Builds the named tools, confined to `workspace`, in the order given.
///
/// A name given twice yields one tool; an unknown name fails the whole grant, so a typo in a
/// pipeline is caught before an agent runs without the tool it was meant to have.
pub fn grant<S: AsRef<str>>(
    names: &[S],
    workspace: &Workspace,
) -> Result<Vec<Arc<dyn Tool>>, UnknownTool> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(names.len());
    let mut seen: Vec<&str> = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref();
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        tools.push(build(name, workspace)?);
    }
    Ok(tools)
}

/// The [`DEFAULT_GRANT`] tools, confined to `workspace`.
pub fn default_grant(workspace: &Workspace) -> Vec<Arc<dyn Tool>> {
    DEFAULT_GRANT
        .iter()
        .filter_map(|name| build(name, workspace).ok())
        .collect()
}

/// Whether `name` is a built-in tool.
pub fn is_builtin(name: &str) -> bool {
    BUILTIN.contains(&name)
}

fn build(name: &str, workspace: &Workspace) -> Result<Arc<dyn Tool>, UnknownTool> {
    let ws = workspace.clone();
    Ok(match name {
        "read_file" => Arc::new(Declared::new(
            files::read_file(ws.clone()),
            ws,
            Access::ReadsPath,
        )),
        "list_dir" => Arc::new(Declared::new(
            files::list_dir(ws.clone()),
            ws,
            Access::ReadsPath,
        )),
        "search_files" => Arc::new(Declared::new(
            search::search_files(ws.clone()),
            ws,
            Access::ReadsPath,
        )),
        "write_file" => Arc::new(Declared::new(
            files::write_file(ws.clone()),
            ws,
            Access::WritesPath,
        )),
        "edit_file" => Arc::new(Declared::new(
            files::edit_file(ws.clone()),
            ws,
            Access::WritesPath,
        )),
        "run_shell" => Arc::new(Declared::new(
            shell::run_shell(ws.clone()),
            ws,
            Access::WritesAll,
        )),
        // The agent step sets who answers (`AgentStep::answerer`) and how long it waits.
        "ask_human" => Arc::new(treadle_session::AskHuman::new()),
        "web_fetch" => Arc::new(web_fetch::web_fetch(ws.fence().clone())),
        other => {
            return Err(UnknownTool {
                name: other.to_owned(),
            });
        }
    })
}

/// Blocking file work runs off the async worker threads through [`blocking`]; a tool
/// whose work stopped without returning fails with this.
impl From<WorkerStopped> for treadle_session::ToolError {
    fn from(stopped: WorkerStopped) -> Self {
        treadle_session::ToolError::new(format!("the tool stopped unexpectedly: {stopped}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_builds_named_tools_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let tools = grant(&["write_file", "read_file", "write_file"], &ws).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["write_file", "read_file"]);
        for tool in grant(&BUILTIN, &ws).unwrap() {
            assert_eq!(tool.parameters()["type"], "object", "{}", tool.name());
            assert!(!tool.description().is_empty());
        }
    }

    #[test]
    fn unknown_tools_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let err = match grant(&["read_file", "rm_rf"], &ws) {
            Err(err) => err,
            Ok(_) => panic!("rm_rf was granted"),
        };
        assert_eq!(err.name, "rm_rf");
        assert!(err.to_string().contains("read_file, list_dir"));
    }

    #[test]
    fn default_grant_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let names: Vec<String> = default_grant(&ws)
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        assert_eq!(names, DEFAULT_GRANT);
    }
}
