//! `search_files`: a regex search over the step directory, built on ripgrep's crates.
//!
//! The walk is ripgrep's: `.gitignore` files and hidden files are skipped, binary files are
//! skipped, and symlinks are not followed, so a search cannot wander out of the step
//! directory through a link.

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use treadle_session::{Effect, FnTool, Tool, ToolError};

use super::output::{MAX_OUTPUT_BYTES, truncate};
use super::{Workspace, blocking};

/// The most matching lines one search returns.
const MAX_MATCHES: usize = 200;
/// The most bytes of one matching line that are shown.
const MAX_LINE_BYTES: usize = 300;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// A regular expression (Rust regex syntax, like ripgrep).
    pattern: String,
    /// The directory or file to search, relative to the step directory (default ".").
    #[serde(default)]
    path: Option<String>,
    /// Only search files whose path matches this glob, such as "*.rs" or "src/**/*.md".
    #[serde(default)]
    glob: Option<String>,
    /// Match without regard to case (default false).
    #[serde(default)]
    case_insensitive: Option<bool>,
}

pub(super) fn search_files(ws: Workspace) -> impl Tool {
    FnTool::new(
        "search_files",
        "Search files in the step directory for a regular expression. Prints path:line: text for each matching line. Skips hidden, ignored and binary files.",
        move |args: SearchArgs| {
            let ws = ws.clone();
            async move { blocking(move || search(&ws, &args)).await }
        },
    )
    // Reads only.
    .effect(Effect::Pure)
}

fn search(ws: &Workspace, args: &SearchArgs) -> Result<String, ToolError> {
    let start = ws
        .resolve(args.path.as_deref().unwrap_or("."))
        .map_err(|e| ToolError::new(e.to_string()))?;
    let shown_start = ws.display(&start);
    if !start.exists() {
        return Err(ToolError::new(format!(
            "no file or directory at {shown_start:?}; use list_dir to see what exists"
        )));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive.unwrap_or(false))
        .build(&args.pattern)
        .map_err(|e| ToolError::new(format!("invalid regex {:?}: {e}", args.pattern)))?;

    let mut walk = WalkBuilder::new(&start);
    walk.follow_links(false).sort_by_file_name(|a, b| a.cmp(b));
    if let Some(glob) = &args.glob {
        let overrides = OverrideBuilder::new(&start)
            .add(glob)
            .and_then(|builder| builder.build())
            .map_err(|e| ToolError::new(format!("invalid glob {glob:?}: {e}")))?;
        walk.overrides(overrides);
    }

    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut lines: Vec<String> = Vec::new();
    let mut more = false;
    for entry in walk.build() {
        // An unreadable entry is skipped, as ripgrep does; the rest of the tree still counts.
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            continue;
        }
        let shown = ws.display(entry.path());
        let sink = UTF8(|number, line| {
            if lines.len() >= MAX_MATCHES {
                more = true;
                return Ok(false);
            }
            lines.push(format!("{shown}:{number}: {}", clip(line.trim_end())));
            Ok(true)
        });
        // A file that cannot be read or is not UTF-8 is skipped rather than failing the
        // search: the model asked about the tree, not about that file.
        let _ = searcher.search_path(&matcher, entry.path(), sink);
        if more {
            break;
        }
    }

    if lines.is_empty() {
        return Ok(format!(
            "no matches for {:?} in {}",
            args.pattern,
            describe(&shown_start, args.glob.as_deref())
        ));
    }
    if more {
        lines.push(format!(
            "[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob]"
        ));
    }
    Ok(truncate(
        lines.join("\n"),
        MAX_OUTPUT_BYTES,
        "narrow the pattern, path or glob",
    ))
}

fn describe(start: &str, glob: Option<&str>) -> String {
    match glob {
        Some(glob) => format!("{start} (files matching {glob:?})"),
        None => start.to_owned(),
    }
}

fn clip(line: &str) -> String {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_owned();
    }
    let mut cut = MAX_LINE_BYTES;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… [line cut]", &line[..cut])
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    fn args(pattern: &str) -> SearchArgs {
        SearchArgs {
            pattern: pattern.into(),
            path: None,
            glob: None,
            case_insensitive: None,
        }
    }

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("step");
        fs::create_dir_all(root.join("src")).unwrap();
        fs::write(
            root.join("src/main.rs"),
            "fn main() {\n    println!(\"hi\");\n}\n",
        )
        .unwrap();
        fs::write(root.join("src/lib.rs"), "pub fn Main() {}\n").unwrap();
        fs::write(root.join("notes.md"), "main idea\n").unwrap();
        fs::write(root.join("blob.bin"), b"main\0\x01\x02").unwrap();
        let ws = Workspace::new(&root).unwrap();
        (dir, ws)
    }

    #[test]
    fn finds_matching_lines_with_paths_and_numbers() {
        let (_dir, ws) = setup();
        let out = search(&ws, &args(r"fn \w+\(")).unwrap();
        assert_eq!(
            out,
            "src/lib.rs:1: pub fn Main() {}\nsrc/main.rs:1: fn main() {"
        );
    }

    #[test]
    fn glob_path_and_case_narrow_the_search() {
        let (_dir, ws) = setup();
        let mut only_md = args("main");
        only_md.glob = Some("*.md".into());
        assert_eq!(search(&ws, &only_md).unwrap(), "notes.md:1: main idea");

        let mut in_src = args("main");
        in_src.path = Some("src".into());
        in_src.case_insensitive = Some(true);
        assert_eq!(
            search(&ws, &in_src).unwrap(),
            "src/lib.rs:1: pub fn Main() {}\nsrc/main.rs:1: fn main() {"
        );
    }

    #[test]
    fn reports_no_matches_and_bad_input() {
        let (_dir, ws) = setup();
        assert_eq!(
            search(&ws, &args("zebra")).unwrap(),
            "no matches for \"zebra\" in ."
        );
        assert!(
            search(&ws, &args("("))
                .unwrap_err()
                .0
                .contains("invalid regex")
        );
        let mut outside = args("x");
        outside.path = Some("../".into());
        assert!(
            search(&ws, &outside)
                .unwrap_err()
                .0
                .contains("outside the step directory")
        );
    }

    #[test]
    fn does_not_follow_symlinks_out() {
        let (dir, ws) = setup();
        fs::write(dir.path().join("secret.txt"), "main secret\n").unwrap();
        symlink(dir.path(), ws.root().join("up")).unwrap();
        let out = search(&ws, &args("secret")).unwrap();
        assert!(out.starts_with("no matches"), "{out}");
    }
}
