//! docs/tools.md (`treadle docs tools`), generated from the built-in tools themselves: each
//! tool's description and argument schema as the model receives them, the grant it needs,
//! what it may touch and its limits, and an example call checked against its schema.
//!
//! Decisions made here: the page is rendered by [`page`] and committed; a test compares the
//! committed file with what [`page`] renders, so a changed schema or description fails the
//! build until the page is regenerated (`TREADLE_WRITE_DOCS=1 cargo test -p treadle --lib
//! tools::reference`). What a schema cannot say (the footprint, the limits, the example)
//! is written here, beside the tool's name, and the example is checked against the schema.

use serde_json::{Value, json};

use super::{BUILTIN, DEFAULT_GRANT, MAX_BODY_BYTES, MAX_OUTPUT_BYTES, Workspace, grant};

/// What the schema cannot say of one tool.
struct Notes {
    /// What its calls may read, write or reach.
    touches: &'static str,
    /// Its limits.
    limits: String,
    /// An example call's arguments.
    example: Value,
}

/// The notes of the built-in tool `name`.
fn notes(name: &str) -> Notes {
    let cut = format!(
        "output cut at {} KiB, with a note of how much was left out",
        MAX_OUTPUT_BYTES / 1024
    );
    let (touches, limits, example) = match name {
        "read_file" => (
            "reads the file at `path` in the step directory",
            cut,
            json!({"path": "src/app.py", "offset": 10, "limit": 40}),
        ),
        "list_dir" => (
            "reads the directory at `path` in the step directory",
            format!("at most {} entries shown", super::files::MAX_ENTRIES),
            json!({"path": "src"}),
        ),
        "search_files" => (
            "reads the files under `path` in the step directory (`.gitignore` honoured)",
            cut,
            json!({"pattern": "def test_", "path": "tests"}),
        ),
        "write_file" => (
            "writes the file at `path` in the step directory (creating its parent directories)",
            "the file is replaced atomically; paths outside the step directory are refused"
                .to_owned(),
            json!({"path": "notes/plan.md", "content": "# Plan\n"}),
        ),
        "edit_file" => (
            "reads and writes the file at `path` in the step directory",
            "`old_string` must occur exactly once in the file".to_owned(),
            json!({"path": "src/app.py", "old_string": "return a - b", "new_string": "return a + b"}),
        ),
        "run_shell" => (
            "runs `sh -c` in the step directory: may read and write anything in it (confined \
             by Landlock where the kernel has it), with the allow-listed environment and no \
             API key",
            format!(
                "timeout {} s unless the call asks for another, at most {} s; everything \
                 the command started is stopped with it; {cut}",
                super::shell::DEFAULT_TIMEOUT_SECS,
                super::shell::MAX_TIMEOUT_SECS
            ),
            json!({"command": "python -m pytest -q", "timeout_secs": 300}),
        ),
        "ask_human" => (
            "no file: the question goes to a person (`treadle answer`, the page)",
            "the step's `ask_human` deadline; the answer must fit the schema given".to_owned(),
            json!({"question": "Which database should the migration target?"}),
        ),
        "web_fetch" => (
            "the network: an HTTP GET of `url`, only to the agent's allowed hosts when it \
             names some; no file",
            format!("text only; the body is cut at {MAX_BODY_BYTES} bytes"),
            json!({"url": "https://docs.python.org/3/library/json.html"}),
        ),
        _ => ("", String::new(), json!({})),
    };
    Notes {
        touches,
        limits,
        example,
    }
}

/// Why an example call does not fit its tool's schema.
fn misfit(schema: &Value, example: &Value) -> Option<String> {
    let props = schema["properties"].as_object()?;
    let args = example.as_object()?;
    if let Some(unknown) = args.keys().find(|k| !props.contains_key(*k)) {
        return Some(format!("unknown argument `{unknown}`"));
    }
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    required
        .iter()
        .filter_map(Value::as_str)
        .find(|r| !args.contains_key(*r))
        .map(|r| format!("required argument `{r}` missing"))
}

/// A property's type in words: `string`, `integer`, `string or null`...
fn type_words(prop: &Value) -> String {
    let one = |t: &Value| match t {
        Value::String(s) => s.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::new(),
    };
    if let Some(t) = prop.get("type") {
        return one(t);
    }
    let variants = prop
        .get("anyOf")
        .or_else(|| prop.get("oneOf"))
        .and_then(Value::as_array);
    match variants {
        Some(vs) => vs
            .iter()
            .filter_map(|v| v.get("type").map(one))
            .filter(|t| !t.is_empty() && t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        None if prop.get("$ref").is_some() || prop.get("properties").is_some() => {
            "object".to_owned()
        }
        None => "any JSON value".to_owned(),
    }
}

/// One line of a table cell: no line breaks, no bars.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The arguments table of a schema.
fn arguments(schema: &Value) -> String {
    let Some(props) = schema["properties"].as_object() else {
        return "No arguments.\n".to_owned();
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = String::from("| argument | type | required | meaning |\n|---|---|---|---|\n");
    for (name, prop) in props {
        out.push_str(&format!(
            "| `{name}` | {} | {} | {} |\n",
            type_words(prop),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                "no"
            },
            cell(prop["description"].as_str().unwrap_or(""))
        ));
    }
    out
}

/// Why the page cannot be rendered: a tool could not be built, or an example does not fit.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The scratch directory the tools are built in.
    #[error("cannot make a scratch workspace: {0}")]
    Scratch(#[source] std::io::Error),
    /// The scratch workspace the tools are built on.
    #[error("cannot make a scratch workspace: {0}")]
    Workspace(#[source] super::WorkspaceError),
    /// A built-in tool of the list is not known (a treadle bug).
    #[error("cannot make a scratch workspace: {0}")]
    Tool(#[source] super::UnknownTool),
    /// An example call does not fit its tool's schema.
    #[error("the example call of `{tool}` does not fit its schema: {why}")]
    Example {
        /// The tool.
        tool: String,
        /// What is wrong.
        why: String,
    },
}

/// The page, rendered from the tools built on a scratch workspace.
pub fn page() -> Result<String, ReferenceError> {
    let dir = tempfile::tempdir().map_err(ReferenceError::Scratch)?;
    let ws = Workspace::new(dir.path()).map_err(ReferenceError::Workspace)?;
    let tools = grant(&BUILTIN, &ws).map_err(ReferenceError::Tool)?;
    let mut out = String::from(HEADER);
    for tool in &tools {
        let name = tool.name();
        let schema = tool.parameters();
        let n = notes(name);
        if let Some(why) = misfit(&schema, &n.example) {
            return Err(ReferenceError::Example {
                tool: name.to_owned(),
                why,
            });
        }
        let grant = match DEFAULT_GRANT.contains(&name) {
            true => "granted by default (read-only)",
            false => "opt-in: name it in the agent's `tools:`",
        };
        let call = serde_json::to_string_pretty(&json!({"name": name, "arguments": n.example}))
            .unwrap_or_default();
        out.push_str(&format!(
            "\n## `{name}`\n\n{}\n\n- **Grant:** {grant}.\n- **May touch:** {}.\n- **Limits:** {}.\n\n{}\nAn example call:\n\n```json\n{call}\n```\n",
            tool.description().trim(),
            n.touches,
            n.limits,
            arguments(&schema),
        ));
    }
    Ok(out)
}

const HEADER: &str = "# Built-in tools

<!-- Generated from the tools' own schemas by src/tools/reference.rs: do not edit by hand.
A test fails when this file differs from what they generate; regenerate it with
`TREADLE_WRITE_DOCS=1 cargo test -p treadle --lib tools::reference`. -->

The tools an agent step may be granted (`tools:` on an agent; without one, the read-only
three). Every path is relative to the step directory: absolute paths, `..` and symlinks
that lead out of it are refused, and a refusal, like any failure of a call, is the call's
result, which the model reads and can correct. The descriptions and argument tables are
what the model receives. A pipeline's own tools (`custom_tools:`) and MCP servers' tools
are described in `treadle docs agents`.
";

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/tools.md, beside the crate's manifest.
    fn committed() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tools.md")
    }

    #[test]
    fn the_committed_page_is_what_the_tools_generate() {
        let page = page().expect("the page renders");
        if std::env::var_os("TREADLE_WRITE_DOCS").is_some() {
            std::fs::write(committed(), &page).expect("write docs/tools.md");
        }
        let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
        assert!(
            on_disk == page,
            "docs/tools.md differs from what the tools' schemas generate; regenerate it with \
             `TREADLE_WRITE_DOCS=1 cargo test -p treadle --lib tools::reference`"
        );
    }

    #[test]
    fn every_tool_is_on_the_page_with_its_arguments() {
        let page = page().expect("the page renders");
        for name in BUILTIN {
            assert!(page.contains(&format!("## `{name}`")), "{name}");
        }
        assert!(page.contains("| `old_string` | string | yes |"), "{page}");
    }

    #[test]
    fn an_example_that_does_not_fit_is_caught() {
        let schema = json!({"properties": {"path": {}}, "required": ["path"]});
        assert!(misfit(&schema, &json!({"path": "a"})).is_none());
        assert!(misfit(&schema, &json!({})).is_some());
        assert!(misfit(&schema, &json!({"path": "a", "file": "b"})).is_some());
    }
}
