//! The files an agent step is handed before its first turn: its `context_paths:` and the
//! run-time form of `prompt_file: { artifact, path }`, read from the step directory.
//!
//! As in steps, a `context_paths:` file reaches a hosted model as a `read_file` call and its
//! result at turn zero ([`Handed`], `treadle_session::TurnRequest::seeded`), after the
//! instruction, as though the model had read it; no turn is spent. An earlier step's
//! decision (`context: { from }`) arrives the same way, as `read_step`. A CLI-backed agent
//! runs its own conversation, so it gets both fenced before its prompt instead.
//!
//! Both are read when the step runs (they live in its inputs, which change between runs),
//! confined to the step directory: an absolute path, a `..` or a symlink leading out of it
//! fails the step before a token is spent.

use std::path::Path;

use crate::tools::Workspace;

/// The cap on one context file when neither the step nor its agent sets
/// `max_context_bytes:` (100 KB).
pub const DEFAULT_CONTEXT_BYTES: u64 = 100_000;

/// Why a file handed to the model (`context_paths:`, `prompt_file:`) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path is not inside the directory (or the directory is not usable).
    #[error("`{path}`: {reason}")]
    Outside {
        /// As the step wrote it.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file cannot be read.
    #[error("`{path}` cannot be read: {source}")]
    Read {
        /// As the step wrote it.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads `path` (relative to `dir`), confined to `dir`.
pub fn read_confined(dir: &Path, path: &str) -> Result<String, ReadError> {
    let outside = |reason: String| ReadError::Outside {
        path: path.to_owned(),
        reason,
    };
    let ws = Workspace::new(dir).map_err(|e| outside(e.to_string()))?;
    let full = ws.resolve(path).map_err(|e| outside(e.to_string()))?;
    std::fs::read(&full)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|source| ReadError::Read {
            path: path.to_owned(),
            source,
        })
}

/// A `context_paths:` file as the model is handed it: the path as the step wrote it
/// (relative to the agent's working directory) and its text, cut to the step's cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    /// The path, as a `read_file` call would give it.
    pub path: String,
    /// The file's text, cut at `max_context_bytes:` with a note saying so.
    pub text: String,
}

/// What a hosted model is handed at turn zero as a tool call of its own and its result
/// (`treadle_session::TurnRequest::seeded`): a `context_paths:` file (`read_file`) or an
/// earlier step's decision (`read_step`, from `context: { from }`), as in steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// The tool the call names.
    pub tool: String,
    /// The call's arguments.
    pub arguments: serde_json::Value,
    /// The result the model reads.
    pub text: String,
}

impl Handed {
    /// A `context_paths:` file, as `read_file` of its path.
    pub fn file(file: ContextFile) -> Self {
        Self {
            tool: "read_file".to_owned(),
            arguments: serde_json::json!({ "path": file.path }),
            text: file.text,
        }
    }

    /// Step `step`'s decision, as `read_step` of its name.
    pub fn decision(step: &str, text: String) -> Self {
        Self {
            tool: "read_step".to_owned(),
            arguments: serde_json::json!({ "step": step }),
            text,
        }
    }

    /// The id of the call that hands over the `index`th item: the step's record tells
    /// these calls from the model's by it.
    pub(crate) fn call_id(index: usize) -> String {
        format!("handed_{index}")
    }

    /// The call (and its result) that hands the item over at turn zero.
    pub(crate) fn seeded(&self, index: usize) -> treadle_session::SeededCall {
        treadle_session::SeededCall::new(
            Self::call_id(index),
            self.tool.clone(),
            self.arguments.clone(),
            self.text.clone(),
        )
    }

    /// What the transcript says was handed over.
    pub(crate) fn notice(&self) -> String {
        format!(
            "handed over before the first turn: {} {} ({} bytes)",
            self.tool,
            self.arguments,
            self.text.len()
        )
    }
}

/// Reads the `paths` (relative to `dir`, confined to it), each cut at `limit` bytes
/// (`0`: no cap) with a note saying where the rest is.
pub fn read_context(
    dir: &Path,
    paths: &[String],
    limit: u64,
) -> Result<Vec<ContextFile>, ReadError> {
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    paths
        .iter()
        .map(|path| {
            let mut text = read_confined(dir, path)?;
            if limit > 0 && text.len() > cap {
                let total = text.len();
                let mut cut = cap;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                let lines = text.lines().count().max(1);
                text.push_str(&format!(
                    "\n[cut at {cap} of {total} bytes (max_context_bytes); read the rest with read_file, offset={lines}]"
                ));
            }
            Ok(ContextFile {
                path: path.clone(),
                text,
            })
        })
        .collect()
}

/// The files as text before the prompt, each fenced and named: for a CLI-backed agent,
/// whose conversation treadle cannot seed.
pub fn prompt_block(files: &[ContextFile]) -> String {
    files
        .iter()
        .map(|f| {
            format!(
                "The file `{path}` (given to you before your first turn):\n<file path=\"{path}\">\n{text}\n</file>\n\n",
                path = f.path,
                text = f.text
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cuts_and_refuses_escapes() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        std::fs::create_dir_all(tmp.path().join("repo"))?;
        std::fs::write(tmp.path().join("repo/CONVENTIONS.md"), "always run go vet")?;
        let paths = ["repo/CONVENTIONS.md".to_owned()];
        let whole = read_context(tmp.path(), &paths, 0)?;
        assert_eq!(whole[0].text, "always run go vet");
        let cut = read_context(tmp.path(), &paths, 6)?;
        assert!(
            cut[0].text.starts_with("always\n[cut at 6 of 17 bytes"),
            "{cut:?}"
        );
        assert!(cut[0].text.contains("read_file, offset=1"), "{cut:?}");
        let block = prompt_block(&whole);
        assert!(block.contains("<file path=\"repo/CONVENTIONS.md\">\nalways run go vet\n</file>"));
        let call = Handed::file(whole[0].clone()).seeded(0);
        assert_eq!(call.name, "read_file");
        assert_eq!(
            call.arguments,
            serde_json::json!({"path": "repo/CONVENTIONS.md"})
        );
        assert_eq!(call.id, Handed::call_id(0));
        let decision = Handed::decision("reviewer", "verdict: approve".into()).seeded(1);
        assert_eq!(
            (decision.name.as_str(), decision.arguments),
            ("read_step", serde_json::json!({"step": "reviewer"}))
        );
        assert!(read_context(tmp.path(), &["../etc/passwd".into()], 0).is_err());
        assert!(read_context(tmp.path(), &["repo/missing.md".into()], 0).is_err());
        Ok(())
    }
}
