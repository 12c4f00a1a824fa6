//! The file tools: `read_file`, `list_dir`, `write_file` and `edit_file`.
//!
//! Each is a [`FnTool`] over typed arguments, so the schema the model sees comes from the
//! argument struct and its doc comments. The work itself is a plain blocking function,
//! tested without a runtime.
//!
//! `write_file` and `edit_file` write atomically: the new content goes to a temporary file
//! beside the target, is synced, and is renamed over it, so a process killed mid-write (or
//! a power loss) leaves the old file or the new one, never part of one. A step resumed
//! after a crash then finds whole files. An existing file keeps its permission bits.

use std::fs;
use std::io;

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::{Effect, FnTool, Tool, ToolError};

use super::output::{MAX_OUTPUT_BYTES, truncate};
use super::{Workspace, blocking};

/// The most entries `list_dir` shows.
pub(super) const MAX_ENTRIES: usize = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The file, relative to the step directory.
    path: String,
    /// The first line to show, counting from 1 (default 1).
    #[serde(default)]
    offset: Option<usize>,
    /// How many lines to show (default: all that fit).
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// The directory, relative to the step directory (default ".").
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// The file, relative to the step directory. Missing parent directories are created.
    path: String,
    /// The whole new content of the file.
    content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    /// The file, relative to the step directory.
    path: String,
    /// Text that occurs exactly once in the file, copied exactly, whitespace included.
    old_string: String,
    /// The text that replaces it.
    new_string: String,
}

pub(super) fn read_file(ws: Workspace) -> impl Tool {
    FnTool::new(
        "read_file",
        "Read a text file in the step directory. Give offset and limit (in lines) to read part of a large file.",
        move |args: ReadArgs| {
            let ws = ws.clone();
            async move { blocking(move || read(&ws, &args)).await }
        },
    )
    // Reads only.
    .effect(Effect::Pure)
}

pub(super) fn list_dir(ws: Workspace) -> impl Tool {
    FnTool::new(
        "list_dir",
        "List a directory in the step directory: subdirectories end with '/', files show their size.",
        move |args: ListArgs| {
            let ws = ws.clone();
            async move { blocking(move || list(&ws, args.path.as_deref().unwrap_or("."))).await }
        },
    )
    // Reads only.
    .effect(Effect::Pure)
}

pub(super) fn write_file(ws: Workspace) -> impl Tool {
    FnTool::new(
        "write_file",
        "Create or replace a file in the step directory with the given content.",
        move |args: WriteArgs| {
            let ws = ws.clone();
            async move { blocking(move || write(&ws, &args.path, &args.content)).await }
        },
    )
    // The same content again leaves the same file.
    .effect(Effect::Idempotent)
}

pub(super) fn edit_file(ws: Workspace) -> impl Tool {
    FnTool::new(
        "edit_file",
        "Replace old_string with new_string in a file. old_string must occur exactly once; include surrounding lines to make it unique.",
        move |args: EditArgs| {
            let ws = ws.clone();
            async move { blocking(move || edit(&ws, &args)).await }
        },
    )
    // Run again, it finds the old text gone and changes nothing.
    .effect(Effect::Idempotent)
}

fn read(ws: &Workspace, args: &ReadArgs) -> Result<String, ToolError> {
    let path = ws.resolve(&args.path).map_err(refused)?;
    let shown = ws.display(&path);
    if path.is_dir() {
        return Err(ToolError::new(format!(
            "{shown:?} is a directory; use list_dir to see what it holds"
        )));
    }
    let bytes = fs::read(&path).map_err(|e| io_error("read", &shown, &e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        ToolError::new(format!(
            "{shown:?} is not UTF-8 text ({} bytes); it is probably a binary file",
            e.as_bytes().len()
        ))
    })?;

    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(usize::MAX);
    let total_lines = text.lines().count();
    if first > 1 && first > total_lines {
        return Err(ToolError::new(format!(
            "offset {first} is past the end of {shown:?}, which has {total_lines} lines"
        )));
    }
    let mut out = String::new();
    let lines = text.split_inclusive('\n').skip(first - 1).take(limit);
    for (number, line) in (first..).zip(lines) {
        if out.len() + line.len() > MAX_OUTPUT_BYTES && !out.is_empty() {
            out.push_str(&format!(
                "[output truncated at line {}; {total_lines} lines in all; read again with offset={number}]",
                number - 1
            ));
            return Ok(out);
        }
        out.push_str(line);
    }
    // A single line longer than the budget is cut by bytes.
    Ok(truncate(
        out,
        MAX_OUTPUT_BYTES,
        "the file has very long lines",
    ))
}

fn list(ws: &Workspace, path: &str) -> Result<String, ToolError> {
    let dir = ws.resolve(path).map_err(refused)?;
    let shown = ws.display(&dir);
    if !dir.is_dir() {
        return Err(ToolError::new(if dir.exists() {
            format!("{shown:?} is a file, not a directory; use read_file to read it")
        } else {
            format!("no directory at {shown:?}; list \".\" to see what exists")
        }));
    }
    let mut entries: Vec<(String, String)> = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| io_error("list", &shown, &e))? {
        let entry = entry.map_err(|e| io_error("list", &shown, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // `file_type` does not follow symlinks: a link is shown as a link, never as what
        // it points to, which may be outside the step directory.
        let line = match entry.file_type() {
            Ok(kind) if kind.is_dir() => format!("{name}/"),
            Ok(kind) if kind.is_symlink() => format!("{name}@ (symlink)"),
            _ => match entry.metadata() {
                Ok(meta) => format!("{name} ({} bytes)", meta.len()),
                Err(_) => name.clone(),
            },
        };
        entries.push((name, line));
    }
    if entries.is_empty() {
        return Ok(format!("{shown}/ is empty"));
    }
    entries.sort();
    let total = entries.len();
    let mut out: Vec<String> = entries
        .into_iter()
        .take(MAX_ENTRIES)
        .map(|(_, line)| line)
        .collect();
    if total > MAX_ENTRIES {
        out.push(format!(
            "[{} more entries not shown; use search_files with a glob to narrow]",
            total - MAX_ENTRIES
        ));
    }
    Ok(truncate(
        out.join("\n"),
        MAX_OUTPUT_BYTES,
        "list a subdirectory",
    ))
}

fn write(ws: &Workspace, path: &str, content: &str) -> Result<String, ToolError> {
    let target = ws.resolve(path).map_err(refused)?;
    let shown = ws.display(&target);
    if target.is_dir() {
        return Err(ToolError::new(format!(
            "{shown:?} is a directory; give a file path inside it"
        )));
    }
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(|e| io_error("create the directory for", &shown, &e))?;
    }
    replace(&target, content.as_bytes()).map_err(|e| io_error("write", &shown, &e))?;
    Ok(format!("wrote {} bytes to {shown}", content.len()))
}

/// Writes `content` to `target` atomically: a synced temporary file in the same directory,
/// renamed over the target (which keeps its permission bits; a new file gets 0644).
fn replace(target: &std::path::Path, content: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = target.parent().unwrap_or_else(|| std::path::Path::new("."));
    let mode = fs::metadata(target).map_or(0o644, |m| m.permissions().mode());
    let mut file = tempfile::Builder::new()
        .prefix(".treadle-write-")
        .tempfile_in(dir)?;
    file.write_all(content)?;
    file.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))?;
    file.as_file().sync_data()?;
    file.persist(target).map_err(|e| e.error)?;
    Ok(())
}

fn edit(ws: &Workspace, args: &EditArgs) -> Result<String, ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::new(
            "old_string is empty; give text that occurs exactly once in the file (use write_file to create a file)",
        ));
    }
    let path = ws.resolve(&args.path).map_err(refused)?;
    let shown = ws.display(&path);
    let text = fs::read_to_string(&path).map_err(|e| io_error("read", &shown, &e))?;
    match occurrences(&text, &args.old_string) {
        0 => Err(ToolError::new(format!(
            "old_string was not found in {shown}; read the file and copy the text exactly, whitespace included"
        ))),
        1 => {
            let edited = text.replacen(&args.old_string, &args.new_string, 1);
            replace(&path, edited.as_bytes()).map_err(|e| io_error("write", &shown, &e))?;
            Ok(format!("replaced 1 occurrence in {shown}"))
        }
        n => Err(ToolError::new(format!(
            "old_string occurs {n} times in {shown}; it must occur exactly once, so include more of the surrounding lines"
        ))),
    }
}

/// Counts occurrences of `needle`, overlapping ones included: "aa" occurs twice in "aaa",
/// and replacing "the" one would be a guess.
fn occurrences(haystack: &str, needle: &str) -> usize {
    let step = needle.chars().next().map_or(1, char::len_utf8);
    let mut count = 0;
    let mut from = 0;
    while let Some(found) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        count += 1;
        from += found + step;
    }
    count
}

fn refused(error: super::PathError) -> ToolError {
    ToolError::new(error.to_string())
}

fn io_error(action: &str, shown: &str, error: &io::Error) -> ToolError {
    let hint = match error.kind() {
        io::ErrorKind::NotFound => "; use list_dir to see what exists",
        io::ErrorKind::PermissionDenied => "; the step may only read this path",
        _ => "",
    };
    ToolError::new(format!("cannot {action} {shown:?}: {error}{hint}"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use serde_json::json;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("step")).unwrap();
        let ws = Workspace::new(dir.path().join("step")).unwrap();
        (dir, ws)
    }

    fn read_args(path: &str) -> ReadArgs {
        ReadArgs {
            path: path.into(),
            offset: None,
            limit: None,
        }
    }

    #[test]
    fn reads_whole_files_and_line_ranges() {
        let (_dir, ws) = setup();
        fs::write(ws.root().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        assert_eq!(read(&ws, &read_args("a.txt")).unwrap(), "one\ntwo\nthree\n");
        let part = ReadArgs {
            path: "a.txt".into(),
            offset: Some(2),
            limit: Some(1),
        };
        assert_eq!(read(&ws, &part).unwrap(), "two\n");
        let past = ReadArgs {
            offset: Some(9),
            ..read_args("a.txt")
        };
        assert!(read(&ws, &past).unwrap_err().0.contains("has 3 lines"));
    }

    #[test]
    fn large_files_are_truncated_with_an_offset_hint() {
        let (_dir, ws) = setup();
        let line = "x".repeat(99) + "\n";
        fs::write(ws.root().join("big.txt"), line.repeat(1000)).unwrap();
        let out = read(&ws, &read_args("big.txt")).unwrap();
        assert!(out.len() <= MAX_OUTPUT_BYTES + 200);
        assert!(
            out.ends_with("1000 lines in all; read again with offset=328]"),
            "{}",
            &out[out.len() - 100..]
        );
    }

    #[test]
    fn read_errors_say_what_to_do() {
        let (_dir, ws) = setup();
        fs::create_dir(ws.root().join("d")).unwrap();
        fs::write(ws.root().join("bin"), [0xff, 0xfe, 0]).unwrap();
        assert!(
            read(&ws, &read_args("d"))
                .unwrap_err()
                .0
                .contains("use list_dir")
        );
        assert!(
            read(&ws, &read_args("bin"))
                .unwrap_err()
                .0
                .contains("not UTF-8")
        );
        assert!(
            read(&ws, &read_args("nope"))
                .unwrap_err()
                .0
                .contains("use list_dir")
        );
        assert!(
            read(&ws, &read_args("../x"))
                .unwrap_err()
                .0
                .contains("outside the step directory")
        );
    }

    #[test]
    fn lists_directories_without_following_links() {
        let (dir, ws) = setup();
        fs::create_dir(ws.root().join("sub")).unwrap();
        fs::write(ws.root().join("f.txt"), "abc").unwrap();
        symlink(dir.path(), ws.root().join("out")).unwrap();
        assert_eq!(
            list(&ws, ".").unwrap(),
            "f.txt (3 bytes)\nout@ (symlink)\nsub/"
        );
        assert_eq!(list(&ws, "sub").unwrap(), "sub/ is empty");
        assert!(list(&ws, "out").unwrap_err().0.contains("symlink"));
        assert!(list(&ws, "f.txt").unwrap_err().0.contains("use read_file"));
    }

    #[test]
    fn writes_create_parents_and_stay_inside() {
        let (dir, ws) = setup();
        assert_eq!(
            write(&ws, "out/deep/a.txt", "42").unwrap(),
            "wrote 2 bytes to out/deep/a.txt"
        );
        assert_eq!(
            fs::read_to_string(ws.root().join("out/deep/a.txt")).unwrap(),
            "42"
        );
        assert!(write(&ws, "../escape.txt", "x").is_err());
        assert!(write(&ws, "/tmp/escape.txt", "x").is_err());
        symlink(dir.path(), ws.root().join("link")).unwrap();
        let err = write(&ws, "link/escape.txt", "x").unwrap_err();
        assert!(err.0.contains("through a symlink"), "{err}");
        assert!(!dir.path().join("escape.txt").exists());
        assert!(
            write(&ws, "out", "x")
                .unwrap_err()
                .0
                .contains("is a directory")
        );
    }

    fn edit_args(old: &str, new: &str) -> EditArgs {
        EditArgs {
            path: "f.txt".into(),
            old_string: old.into(),
            new_string: new.into(),
        }
    }

    #[test]
    fn edit_replaces_an_exact_single_match() {
        let (_dir, ws) = setup();
        fs::write(ws.root().join("f.txt"), "alpha\nbeta\ngamma\nbeta\n").unwrap();
        assert_eq!(
            edit(&ws, &edit_args("alpha", "ALPHA")).unwrap(),
            "replaced 1 occurrence in f.txt"
        );
        assert_eq!(
            fs::read_to_string(ws.root().join("f.txt")).unwrap(),
            "ALPHA\nbeta\ngamma\nbeta\n"
        );
    }

    #[test]
    fn a_write_replaces_the_file_whole_keeping_its_mode_and_leaving_no_temporary() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, ws) = setup();
        let (file, link) = (ws.root().join("f.txt"), ws.root().join("g.txt"));
        fs::write(&file, "old").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o750)).unwrap();
        fs::hard_link(&file, &link).unwrap();
        write(&ws, "f.txt", "new content").unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "new content");
        // A rename gives the path a new inode: the other name still holds the old bytes.
        assert_eq!(fs::read_to_string(&link).unwrap(), "old");
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o750
        );
        edit(&ws, &edit_args("content", "text")).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "new text");
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o750
        );
        let mut names: Vec<String> = fs::read_dir(ws.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["f.txt", "g.txt"], "no temporary file is left");
    }

    #[test]
    fn edit_refuses_zero_or_many_matches() {
        let (_dir, ws) = setup();
        fs::write(ws.root().join("f.txt"), "beta\nbeta\n").unwrap();
        let many = edit(&ws, &edit_args("beta", "x")).unwrap_err();
        assert!(many.0.contains("occurs 2 times in f.txt"), "{many}");
        let none = edit(&ws, &edit_args("delta", "x")).unwrap_err();
        assert!(none.0.contains("not found in f.txt"), "{none}");
        assert!(
            edit(&ws, &edit_args("", "x"))
                .unwrap_err()
                .0
                .contains("empty")
        );
        // Nothing was written on a refusal.
        assert_eq!(
            fs::read_to_string(ws.root().join("f.txt")).unwrap(),
            "beta\nbeta\n"
        );
        assert_eq!(occurrences("aaa", "aa"), 2);
        assert_eq!(occurrences("ééé", "é"), 3);
    }

    #[tokio::test]
    async fn tools_take_json_arguments() {
        let (_dir, ws) = setup();
        let write_tool = write_file(ws.clone());
        let read_tool = read_file(ws.clone());
        write_tool
            .call(json!({"path": "in/a.txt", "content": "hello"}))
            .await
            .unwrap();
        assert_eq!(
            read_tool.call(json!({"path": "in/a.txt"})).await.unwrap(),
            "hello"
        );
        let err = read_tool
            .call(json!({"path": "../a.txt"}))
            .await
            .unwrap_err();
        assert_eq!(
            err.0,
            r#"path "../a.txt" is outside the step directory; use a path relative to it"#
        );
        assert!(read_tool.call(json!({"file": "a"})).await.is_err());
    }
}
