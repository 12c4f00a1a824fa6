//! The library as a user meets it: every Rust block of README.md, docs/*.md and the
//! rustdoc of treadle-session's source, and every program of examples/, compiled in a
//! scratch workspace of user crates whose only dependencies are the ones docs/library.md
//! tells a user to add (`treadle-session`, by path under its published name, and `tokio`),
//! plus `treadle` for the workflow pages, plus exactly the crates a block names on its
//! first line (`// needs: futures`). The blocks not marked `no_run` are run; the library
//! examples are run against the scripted server (real loopback HTTP) with the variables
//! `SessionBuilder::from_env` reads. The five programs of docs/library.md's table are held
//! to their line counts.
//!
//! One `cargo build` builds the whole scratch workspace, in its own target directory beside
//! this one (a nested cargo must not wait on the lock of the cargo running this test): the
//! first build compiles the dependencies once, later ones only what changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use blocks::Program;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use treadle_scripted::{Reply, Script, ScriptedServer};

mod blocks;

/// The examples that are not treadle-session programs: the workflows, which use the
/// treadle crate (tests/workflow_examples.rs runs them; here they are only built), with
/// the crates each needs beyond `treadle` and `tokio`, as docs/workflows.md says
/// (`serde::Deserialize` and `schemars::JsonSchema` for typed answers and inputs).
/// The served binary of proofs/ is one such user program too.
const WORKFLOW_PROGRAMS: &[(&str, &[&str])] = &[
    ("examples/fanout_workflow.rs", &["schemars", "serde"]),
    ("examples/people_workflow.rs", &["schemars", "serde"]),
    ("examples/review_workflow.rs", &[]),
    ("proofs/src/bin/workflow_server.rs", &["schemars", "serde"]),
];

/// The Markdown pages whose Rust blocks are excerpts of the workflow programs above (held
/// to them, as written, by tests/workflow_examples.rs), not programs of their own.
const EXCERPT_PAGES: &[&str] = &["docs/workflows.md"];

/// The dependency line of each crate a block may name in `// needs:`.
fn needed(name: &str) -> &'static str {
    match name {
        "futures" => r#"futures = "0.3""#,
        "serde" => r#"serde = { version = "1", features = ["derive"] }"#,
        "schemars" => r#"schemars = "1""#,
        "serde_json" => r#"serde_json = "1""#,
        other => panic!("`// needs: {other}`: add its dependency line to `needed`"),
    }
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The library examples (every `examples/*.rs` but the workflows), as programs.
fn examples() -> Vec<Program> {
    let dir = workspace().join("examples");
    let mut found: Vec<Program> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            let rel = format!("examples/{name}");
            (!WORKFLOW_PROGRAMS.iter().any(|(w, _)| *w == rel)).then(|| Program {
                origin: rel,
                bin: name.trim_end_matches(".rs").to_owned(),
                needs: Vec::new(),
                workflow: false,
                runs: false,
                source: std::fs::read_to_string(&path).expect("example"),
            })
        })
        .collect();
    found.sort_by(|a, b| a.bin.cmp(&b.bin));
    for (rel, needs) in WORKFLOW_PROGRAMS {
        let path = workspace().join(rel);
        found.push(Program {
            origin: (*rel).to_owned(),
            bin: path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("name")
                .to_owned(),
            needs: needs.iter().map(|n| (*n).to_owned()).collect(),
            workflow: true,
            runs: false,
            source: std::fs::read_to_string(&path).expect("workflow program"),
        });
    }
    found
}

/// Every Rust block a user reads: README.md, docs/*.md (but the excerpt pages), and the
/// rustdoc of treadle-session's source.
fn doc_blocks() -> Vec<Program> {
    let root = workspace();
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .filter(|rel| !EXCERPT_PAGES.contains(&rel.as_str()))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".to_owned());
    let mut found: Vec<Program> = pages
        .iter()
        .flat_map(|rel| blocks::markdown(root, rel))
        .collect();
    found.extend(blocks::rustdoc(root, "pkg-session/src"));
    found
}

/// This test run's target directory (the test binary is `<target>/<profile>/deps/<name>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

/// The package a program belongs to: `user-crate` (treadle-session and tokio), with
/// `-workflow` when it uses treadle, and `-<crate>` for each crate it needs.
fn package_of(program: &Program) -> String {
    let mut name = String::from("user-crate");
    if program.workflow {
        name.push_str("-workflow");
    }
    for need in &program.needs {
        name.push('-');
        name.push_str(need);
    }
    name
}

/// A package's manifest: `treadle-session` and `tokio`, `treadle` for the workflow
/// pages, and each needed crate. The docs may use nothing deprecated.
fn manifest(name: &str, program: &Program) -> String {
    let root = workspace();
    let session = root.join("pkg-session").display().to_string();
    let mut deps = format!(
        "treadle-session = {{ path = \"{session}\" }}\n\
         tokio = {{ version = \"1\", features = [\"rt-multi-thread\", \"macros\"] }}\n"
    );
    if program.workflow {
        deps.push_str(&format!("treadle = {{ path = \"{}\" }}\n", root.display()));
    }
    for need in &program.needs {
        deps.push_str(needed(need));
        deps.push('\n');
    }
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\n{deps}\n\
         [lints.rust]\nunused = \"allow\"\ndead_code = \"allow\"\ndeprecated = \"deny\"\n"
    )
}

/// Writes the scratch workspace: one package per set of dependencies, each program a
/// binary of its package. Returns the binaries' package by name.
fn write_workspace(dir: &Path, programs: &[Program]) -> BTreeMap<String, String> {
    let mut packages: BTreeMap<String, Vec<&Program>> = BTreeMap::new();
    for program in programs {
        packages
            .entry(package_of(program))
            .or_default()
            .push(program);
    }
    let members: Vec<String> = packages.keys().map(|k| format!("{k:?}")).collect();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"3\"\nmembers = [{}]\n\n[profile.dev]\ndebug = false\n",
            members.join(", ")
        ),
    )
    .expect("workspace manifest");
    // The workspace's lock, so the user crates build with the versions tested here.
    std::fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock")).expect("lock");
    // The served binary includes two workflow examples by a path relative to itself.
    std::fs::create_dir_all(dir.join("examples")).expect("examples/");
    for (rel, _) in WORKFLOW_PROGRAMS
        .iter()
        .filter(|(r, _)| r.starts_with("examples/"))
    {
        std::fs::copy(workspace().join(rel), dir.join(rel)).expect("workflow example");
    }
    let mut bins = BTreeMap::new();
    for (name, members) in &packages {
        let bin_dir = dir.join(name).join("src/bin");
        std::fs::create_dir_all(&bin_dir).expect("src/bin");
        std::fs::write(
            dir.join(name).join("Cargo.toml"),
            manifest(name, members[0]),
        )
        .expect("manifest");
        for program in members {
            let file = bin_dir.join(format!("{}.rs", program.bin));
            assert!(!file.exists(), "two programs named {}", program.bin);
            std::fs::write(&file, &program.source).expect("program");
            bins.insert(program.bin.clone(), name.clone());
        }
    }
    bins
}

/// `cargo build` in the scratch workspace `dir` with `args`, in the user crates' target.
async fn cargo_build(dir: &Path, args: &[&str]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .arg("build")
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir().join("user-crate"))
        // Incremental files would only grow the disk: each build here is from scratch.
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("RUSTFLAGS")
        .output()
        .await
        .expect("cargo build")
}

/// The user crates, built: every example and doc block. Returns the scratch directory (kept
/// for the check that a missing crate fails), the directory of the binaries, and the blocks.
async fn build_user_crate() -> (tempfile::TempDir, PathBuf, Vec<Program>) {
    let dir = tempfile::tempdir().expect("scratch dir");
    let docs = doc_blocks();
    let mut programs = examples();
    programs.extend(docs.iter().cloned());
    write_workspace(dir.path(), &programs);
    // --keep-going: every block that fails is reported, not only the first.
    let args = ["--workspace", "--bins", "--keep-going", "--quiet"];
    let out = cargo_build(dir.path(), &args).await;
    let origins: Vec<String> = programs
        .iter()
        .map(|p| format!("{} = {}", p.bin, p.origin))
        .collect();
    assert!(
        out.status.success(),
        "the docs and examples do not build in a user crate:\n{}\nbinaries:\n{}",
        String::from_utf8_lossy(&out.stderr),
        origins.join("\n")
    );
    (dir, target_dir().join("user-crate/debug"), docs)
}

/// Runs each doc block not marked `no_run`: it must exit 0.
async fn run_blocks(bin: &Path, docs: &[Program]) {
    for program in docs.iter().filter(|p| p.runs) {
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            Command::new(bin.join(&program.bin))
                .env_remove("OPENAI_BASE_URL")
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("{} did not finish", program.origin))
        .expect("run block");
        assert!(
            out.status.success(),
            "{} fails when run:\n{}",
            program.origin,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A block that uses a crate without naming it in `// needs:` does not build: the first
/// block that needs `futures`, its `needs` line left out, in the plain user crate.
async fn a_missing_crate_fails_the_build(dir: &Path, docs: &[Program]) {
    let block = docs
        .iter()
        .find(|p| p.needs == ["futures"])
        .expect("a doc block that needs futures (docs/library.md, Catching up)");
    let bin = "doc_without_its_needs";
    let file = dir.join("user-crate/src/bin").join(format!("{bin}.rs"));
    std::fs::write(&file, &block.source).expect("program");
    let out = cargo_build(dir, &["-p", "user-crate", "--bin", bin, "--quiet"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("`futures`"),
        "{} built without `futures` in the user crate:\n{stderr}",
        block.origin
    );
}

/// Lines of a program as docs/library.md counts them, after rustfmt: non-blank, not a
/// comment; `use` lines count.
fn code_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .expect("example")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// The five programs of docs/library.md's table: (file, target, the Agents SDK's lines).
const FIVE: &[(&str, usize, usize)] = &[
    ("one_prompt.rs", 7, 7),
    ("stream_tool.rs", 26, 22),
    ("hook.rs", 48, 40),
    ("restore.rs", 13, 11),
    ("two_handles.rs", 26, 22),
];

#[test]
fn the_five_programs_stay_within_their_line_targets_and_the_docs_say_so() {
    let dir = workspace().join("examples");
    let guide = std::fs::read_to_string(workspace().join("docs/library.md")).expect("guide");
    for (name, target, sdk) in FIVE {
        let lines = code_lines(&dir.join(name));
        println!("{name}: {lines} lines (target {target}, the SDK's {sdk})");
        assert!(
            lines <= *target,
            "{name} takes {lines} lines, over {target}"
        );
        assert!(
            lines * 5 <= sdk * 6,
            "{name}: {lines} lines, over 1.2 x {sdk}"
        );
        let row = format!("| `examples/{name}` | {lines} | ~{sdk} |");
        assert!(guide.contains(&row), "docs/library.md lacks the row {row}");
    }
}

/// Runs example `name` against `server`, with `stdin` as its input and `tmp` as its
/// temporary directory (where its journals go).
async fn run(
    bin: &Path,
    tmp: &Path,
    name: &str,
    server: &ScriptedServer,
    stdin: &str,
) -> (String, String) {
    run_with(bin, tmp, name, &[], server, stdin).await
}

/// [`run`] with command-line arguments.
async fn run_with(
    bin: &Path,
    tmp: &Path,
    name: &str,
    args: &[&str],
    server: &ScriptedServer,
    stdin: &str,
) -> (String, String) {
    let mut child = Command::new(bin.join(name))
        .env("OPENAI_BASE_URL", server.base_url())
        .env("OPENAI_MODEL", "scripted")
        .env("TMPDIR", tmp)
        .env_remove("OPENAI_API_KEY")
        .current_dir(tmp)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn example");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).await.expect("stdin");
    drop(input);
    let out: Output =
        tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("example finishes")
            .expect("example output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{name}: {stdout}\n{stderr}");
    (stdout, stderr)
}

async fn server(replies: impl IntoIterator<Item = Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::new(replies))
        .await
        .expect("scripted server")
}

/// The text of the tool results the model was sent back, in order.
fn tool_results(server: &ScriptedServer) -> Vec<String> {
    server
        .requests()
        .last()
        // The last request carries the whole conversation, so each result is in it once.
        .map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// One build for all: the doc blocks (run where they run; a crate left out of `needs`
/// fails), then each library example against the scripted server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_doc_block_and_example_builds_in_a_user_crate_and_runs() {
    let (dir, bin, docs) = build_user_crate().await;
    assert!(docs.len() >= 10, "found only {} doc blocks", docs.len());
    run_blocks(&bin, &docs).await;
    a_missing_crate_fails_the_build(dir.path(), &docs).await;
    let tmp = tempfile::tempdir().expect("the programs' temp dir");

    // One prompt, one answer, and a clean exit from `main`.
    let model = server([Reply::text("red")]).await;
    let (out, err) = run(&bin, tmp.path(), "one_prompt", &model, "").await;
    assert_eq!(out, "red\n");
    assert!(!err.contains("without Active::finish"), "{err}");
    // `main` returning an `Error` prints its message, which names what is missing.
    let out = Command::new(bin.join("one_prompt"))
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_MODEL", "scripted")
        .output()
        .await
        .expect("one_prompt");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("Error: ") && err.contains("OPENAI_BASE_URL"),
        "{err}"
    );
    assert!(!err.contains("MissingEndpoint"), "{err}");

    // A turn streamed with a custom tool.
    let model = server([
        Reply::tool_call("add", json!({ "a": 2, "b": 3 })),
        Reply::text("2 + 3 = 5"),
    ])
    .await;
    let (out, _) = run(&bin, tmp.path(), "stream_tool", &model, "").await;
    assert!(out.contains("[add -> 5]"), "{out}");
    assert!(out.contains("answer: 2 + 3 = 5"), "{out}");

    // A hook that logs every operation and denies one tool (it never runs), and a gate its
    // `ask` opens, answered in code (that tool runs once).
    let model = server([
        Reply::tool_call("delete_file", json!({ "path": "notes.txt" })),
        Reply::tool_call("write_file", json!({ "path": "todo.txt" })),
        Reply::text("done."),
    ])
    .await;
    let (out, err) = run(&bin, tmp.path(), "hook", &model, "").await;
    assert!(
        err.contains("[audit] tool_call delete_file ends: denied"),
        "{err}"
    );
    assert!(!err.contains("tool_execution delete_file"), "{err}");
    assert!(
        err.contains("[gate] write_file asks: write a file?"),
        "{err}"
    );
    assert!(
        err.contains("[audit] tool_execution write_file ends: completed"),
        "{err}"
    );
    // The library ended every operation it began: no warning about one left open.
    assert!(!err.contains("without Active::finish"), "{err}");
    assert!(out.contains("done."), "{out}");
    let results = tool_results(&model);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("may not delete"), "{results:?}");
    assert_eq!(results[1], "wrote todo.txt");

    // A permission gate answered at the terminal: `y` approves, the tool runs once.
    let model = server([
        Reply::tool_call(
            "write_file",
            json!({ "path": "notes.txt", "content": "hello" }),
        ),
        Reply::text("written"),
    ])
    .await;
    let (out, _) = run(&bin, tmp.path(), "gate", &model, "y\n").await;
    assert!(out.contains("write_file"), "{out}");
    assert!(out.contains("Done"), "{out}");
    assert_eq!(
        tool_results(&model),
        vec!["wrote 5 bytes to notes.txt".to_owned()]
    );

    restore_after_sigkill(&bin, tmp.path()).await;

    // Two handles, restore of the live session refused; `main` returns with both live.
    let model = server([Reply::text("blue")]).await;
    let (out, _) = run(&bin, tmp.path(), "two_handles", &model, "").await;
    assert!(out.contains("answer: blue"), "{out}");
    assert!(out.contains("refused: "), "{out}");
    let path = out
        .lines()
        .find_map(|l| l.strip_prefix("journal: "))
        .expect("the journal's path");
    let journal = treadle_session::Journal::open(path).expect("the journal, released");
    let sessions = journal.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let events = journal.read(sessions[0], 1, None).expect("read");
    let last = events.last().map(|(_, e)| e.kind.name());
    assert_eq!(
        last,
        Some("session_stopped"),
        "returning from main stops cleanly"
    );
}

/// examples/restore.rs: killed (SIGKILL) while the model answers, then run again with the
/// session id it printed: the restore closes the cut turn and the question is answered.
async fn restore_after_sigkill(bin: &Path, tmp: &Path) {
    use tokio::io::AsyncBufReadExt;
    let model = server([Reply::text("bl").block_after(1)]).await;
    let mut child = Command::new(bin.join("restore"))
        .env("OPENAI_BASE_URL", model.base_url())
        .env("OPENAI_MODEL", "scripted")
        .current_dir(tmp)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn restore");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next_line().await.expect("stdout").unwrap_or_default();
    let id = first
        .strip_prefix("session ")
        .expect("the session id")
        .to_owned();
    // The turn is under way once its model call has reached the server.
    let wait = async {
        while model.requests().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), wait)
        .await
        .expect("the model is asked");
    child.start_kill().expect("SIGKILL");
    let status = child.wait().await.expect("killed");
    assert!(!status.success(), "{status:?}");

    let model = server([Reply::text("blue")]).await;
    let (out, _) = run_with(bin, tmp, "restore", &[&id], &model, "").await;
    assert!(out.contains(&format!("session {id}")), "{out}");
    assert!(out.contains("answer: blue"), "{out}");
    let journal = treadle_session::Journal::open(tmp.join("restore.redb")).expect("journal");
    let kinds: Vec<&str> = journal
        .read(id.parse().expect("id"), 1, None)
        .expect("read")
        .iter()
        .map(|(_, e)| e.kind.name())
        .collect();
    assert!(kinds.contains(&"session_restored"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "turn_done").count(),
        1,
        "the killed turn never ended as done: {kinds:?}"
    );
}
