//! The Rust blocks a user reads (README.md, docs/*.md, and the rustdoc of treadle-session's
//! source) turned into programs of the user crate: hidden (`# `) lines shown, the block
//! wrapped in `fn main` unless it has one, as rustdoc would, and its first line's
//! `// needs: a, b` read as the crates it adds to `treadle-session` and `tokio`.

use std::path::Path;

/// One program of the user crate: a doc block, or a whole file of examples/.
#[derive(Debug, Clone)]
pub struct Program {
    /// Where a reader finds it (`docs/library.md:114`), for failure messages.
    pub origin: String,
    /// Its binary's name in the user crate.
    pub bin: String,
    /// The crates it needs beyond `treadle-session` and `tokio` (sorted).
    pub needs: Vec<String>,
    /// Whether it uses the `treadle` crate (the workflow pages).
    pub workflow: bool,
    /// Whether it is run after the build (a block not marked `no_run`).
    pub runs: bool,
    /// Its source, as the user crate compiles it.
    pub source: String,
}

/// The info string of a fence, as rustdoc reads it: `Some(runs)` for a Rust block to
/// compile, `None` for another language or a block rustdoc does not compile either.
/// In Markdown pages only blocks marked `rust` count; in rustdoc an unmarked block is Rust.
fn rust_fence(info: &str, rustdoc: bool) -> Option<bool> {
    let tokens: Vec<&str> = info
        .split([',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.is_empty() {
        return rustdoc.then_some(true);
    }
    if !tokens.contains(&"rust") && !rustdoc {
        return None;
    }
    let mut runs = true;
    for token in tokens {
        match token {
            "rust" => {}
            "no_run" | "should_panic" => runs = false,
            t if t.starts_with("edition") => {}
            // ignore, compile_fail, text, toml, json, sh, ...: not compiled by rustdoc.
            _ => return None,
        }
    }
    Some(runs)
}

/// The fenced Rust blocks of `text` (Markdown, or doc comments with their `///` cut),
/// each with the line (1-based, in `text`) of its first code line.
fn fenced(text: &str, rustdoc: bool) -> Vec<(usize, bool, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Option<bool>, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((i + 2, rust_fence(info, rustdoc), indent, Vec::new()));
                }
            }
            Some((start, kind, indent_of, lines)) => {
                if trimmed.starts_with("```") {
                    if let Some(runs) = kind {
                        blocks.push((*start, *runs, std::mem::take(lines)));
                    }
                    open = None;
                } else {
                    let cut = line.len().min(*indent_of);
                    let keep = if line[..cut].trim().is_empty() {
                        &line[cut..]
                    } else {
                        line
                    };
                    lines.push(keep.to_owned());
                }
            }
        }
    }
    blocks
}

/// A block's program: hidden lines shown, `needs` read, wrapped in `fn main` unless it has
/// one (its `#![...]` lines kept at the top, where they must be).
fn program(origin: String, runs: bool, lines: &[String]) -> Program {
    let mut code: Vec<String> = lines
        .iter()
        .map(|line| {
            let t = line.trim_start();
            if t == "#" {
                String::new()
            } else if let Some(rest) = t.strip_prefix("# ") {
                rest.to_owned()
            } else if let Some(rest) = t.strip_prefix("##") {
                format!("#{rest}")
            } else {
                line.clone()
            }
        })
        .collect();
    let mut needs = Vec::new();
    if let Some(first) = code.first()
        && let Some(list) = first.trim().strip_prefix("// needs:")
    {
        needs = list
            .split(',')
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        needs.sort();
        code.remove(0);
    }
    let body = code.join("\n");
    let workflow = body.contains("treadle::");
    let source = if body.contains("fn main") {
        body
    } else {
        let (inner, rest): (Vec<&String>, Vec<&String>) =
            code.iter().partition(|l| l.trim_start().starts_with("#!["));
        let inner: Vec<&str> = inner.iter().map(|l| l.as_str()).collect();
        let rest: Vec<&str> = rest.iter().map(|l| l.as_str()).collect();
        format!(
            "{}\nfn main() {{\n{}\n}}\n",
            inner.join("\n"),
            rest.join("\n")
        )
    };
    let bin = format!(
        "doc_{}",
        origin
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
    );
    Program {
        source: format!("// {origin}\n{source}"),
        origin,
        bin,
        needs,
        workflow,
        runs,
    }
}

/// The Rust blocks of the Markdown file `rel` under `root`.
pub fn markdown(root: &Path, rel: &str) -> Vec<Program> {
    let text = std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    fenced(&text, false)
        .into_iter()
        .map(|(line, runs, lines)| program(format!("{rel}:{line}"), runs, &lines))
        .collect()
}

/// The Rust blocks of the doc comments (`///`, `//!`) of every `.rs` file under `dir`
/// (relative to `root`), as rustdoc compiles them.
pub fn rustdoc(root: &Path, dir: &str) -> Vec<Program> {
    let mut files = Vec::new();
    collect_rs(&root.join(dir), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        // Each doc line's text, and blank lines where the source has code, so that a
        // block's line in the doc text is its line in the file.
        let docs: Vec<&str> = text
            .lines()
            .map(|l| {
                let t = l.trim_start();
                match t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) {
                    Some(rest) if !rest.starts_with('/') => rest.strip_prefix(' ').unwrap_or(rest),
                    _ => "",
                }
            })
            .collect();
        for (line, runs, lines) in fenced(&docs.join("\n"), true) {
            out.push(program(format!("{rel}:{line}"), runs, &lines));
        }
    }
    out
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn a_block_becomes_the_program_rustdoc_would_compile() {
    let lines: Vec<String> = [
        "// needs: serde, futures",
        "use futures::StreamExt;",
        "# async fn demo() {",
        "let x = 1;",
        "#",
        "# }",
    ]
    .map(String::from)
    .to_vec();
    let p = program("docs/x.md:3".into(), false, &lines);
    assert_eq!(p.needs, ["futures", "serde"]);
    assert_eq!(p.bin, "doc_docs_x_md_3");
    assert!(!p.workflow);
    assert!(
        p.source.contains(
            "fn main() {\nuse futures::StreamExt;\nasync fn demo() {\nlet x = 1;\n\n}\n}"
        ),
        "{}",
        p.source
    );
    let md = "text\n```rust,no_run\nfn main() {}\n```\n```toml\n[x]\n```\n```\nnot rust\n```\n";
    let blocks = fenced(md, false);
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0].0, blocks[0].1), (3, false));
    // In rustdoc an unmarked fence is Rust, and `text` is not.
    assert_eq!(
        fenced("```\nlet a = 1;\n```\n```text\nx\n```", true).len(),
        1
    );
}
