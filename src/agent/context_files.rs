//! The files an agent step is handed before its first turn: its `context_paths:` and the
//! run-time form of `prompt_file: { artifact, path }`, read from the step directory.
//!
//! Both are read when the step runs (they live in its inputs, which change between runs),
//! confined to the step directory: an absolute path, a `..` or a symlink leading out of it
//! fails the step before a token is spent.

use std::path::Path;

use crate::tools::Workspace;

/// The cap on one context file when neither the step nor its agent sets
/// `max_context_bytes:` (100 KB).
pub const DEFAULT_CONTEXT_BYTES: u64 = 100_000;

/// Reads `path` (relative to `dir`), confined to `dir`.
pub fn read_confined(dir: &Path, path: &str) -> Result<String, String> {
    let ws = Workspace::new(dir).map_err(|e| format!("`{path}`: {e}"))?;
    let full = ws.resolve(path).map_err(|e| format!("`{path}`: {e}"))?;
    std::fs::read(&full)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| format!("`{path}` cannot be read: {e}"))
}

/// The text the prompt is prefixed with: each file's content, fenced and named, cut at
/// `limit` bytes (`0`: no cap) with a note saying so.
pub fn context_block(dir: &Path, paths: &[String], limit: u64) -> Result<String, String> {
    let mut out = String::new();
    for path in paths {
        let mut text = read_confined(dir, path).map_err(|e| format!("context_paths: {e}"))?;
        let cap = usize::try_from(limit).unwrap_or(usize::MAX);
        let note = if limit > 0 && text.len() > cap {
            let total = text.len();
            let mut cut = cap;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            format!(
                "\n[cut at {cap} of {total} bytes; read the rest with read_file and its line range]"
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "The file `{path}` (given to you before your first turn):\n<file path=\"{path}\">\n{text}\n</file>{note}\n\n"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cuts_and_refuses_escapes() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        std::fs::create_dir_all(tmp.path().join("repo"))?;
        std::fs::write(tmp.path().join("repo/CONVENTIONS.md"), "always run go vet")?;
        let whole = context_block(tmp.path(), &["repo/CONVENTIONS.md".into()], 0)?;
        assert!(whole.contains("always run go vet"), "{whole}");
        let cut = context_block(tmp.path(), &["repo/CONVENTIONS.md".into()], 6)?;
        assert!(cut.contains("always\n</file>"), "{cut}");
        assert!(cut.contains("cut at 6 of 17 bytes"), "{cut}");
        assert!(context_block(tmp.path(), &["../etc/passwd".into()], 0).is_err());
        assert!(context_block(tmp.path(), &["repo/missing.md".into()], 0).is_err());
        Ok(())
    }
}
