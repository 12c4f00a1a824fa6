//! The library's examples as a user meets them: copied into a scratch crate that depends
//! on the workspace crates by path under their published names (`treadle-session`,
//! `treadle-hook`, `treadle-event`), built there, and each program run against the
//! scripted server (real loopback HTTP).
//!
//! The scratch crate builds in its own target directory beside this one (a nested cargo
//! must not wait on the lock of the cargo running this test); the first build compiles
//! the dependencies once, later ones only what changed.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// The library examples (every `examples/*.rs`).
fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    found.sort();
    found
}

/// This test run's target directory (the test binary is `<target>/<profile>/deps/<name>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

fn manifest(workspace: &Path) -> String {
    let path = |dir: &str| workspace.join(dir).display().to_string();
    format!(
        r#"[package]
name = "user-crate"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
treadle-session = {{ path = "{session}" }}
treadle-hook = {{ path = "{hook}" }}
treadle-event = {{ path = "{event}" }}
tokio = {{ version = "1", features = ["rt-multi-thread", "macros"] }}
futures = "0.3"
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"
schemars = "1.2"
tempfile = "3"
clap = {{ version = "4.6", features = ["derive"] }}

[profile.dev]
debug = false

[workspace]
"#,
        session = path("pkg-session"),
        hook = path("pkg-hook"),
        event = path("pkg-event"),
    )
}

/// Builds every example in the scratch crate; returns the directory of the binaries.
async fn build_user_crate() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_dir = tempfile::tempdir().expect("scratch dir");
    let bin = crate_dir.path().join("src/bin");
    std::fs::create_dir_all(&bin).expect("src/bin");
    std::fs::write(crate_dir.path().join("Cargo.toml"), manifest(workspace)).expect("manifest");
    // The workspace's lock, so the user crate builds with the versions tested here.
    std::fs::copy(
        workspace.join("Cargo.lock"),
        crate_dir.path().join("Cargo.lock"),
    )
    .expect("lock");
    for example in examples() {
        std::fs::copy(&example, bin.join(example.file_name().expect("name"))).expect("copy");
    }
    let target = target_dir().join("user-crate");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--bins", "--quiet"])
        .current_dir(crate_dir.path())
        .env("CARGO_TARGET_DIR", &target)
        // Incremental files would only grow the disk: each build here is from scratch.
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("RUSTFLAGS")
        .output()
        .await
        .expect("cargo build");
    assert!(
        out.status.success(),
        "the examples do not build in a user crate:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug")
}

/// Runs example `name` against `server`, with `stdin` as its input.
async fn run(bin: &Path, name: &str, server: &ScriptedServer, stdin: &str) -> (String, String) {
    let mut child = Command::new(bin.join(name))
        .env("OPENAI_BASE_URL", server.base_url())
        .env_remove("OPENAI_API_KEY")
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
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_builds_in_a_user_crate_and_runs_against_the_scripted_server() {
    let bin = build_user_crate().await;

    // A turn streamed with a custom tool.
    let model = server([
        Reply::tool_call("add", json!({ "a": 2, "b": 3 })),
        Reply::text("2 + 3 = 5"),
    ])
    .await;
    let (out, _) = run(&bin, "stream_tool", &model, "").await;
    assert!(out.contains("[add -> 5]"), "{out}");
    assert!(out.contains("answer: 2 + 3 = 5"), "{out}");

    // A hook plugin that logs every operation and denies a tool: the tool never runs.
    let model = server([
        Reply::tool_call("delete_file", json!({ "path": "notes.txt" })),
        Reply::text("I may not delete it."),
    ])
    .await;
    let (out, err) = run(&bin, "hook", &model, "").await;
    assert!(
        err.contains("[audit] tool_call delete_file ends: denied"),
        "{err}"
    );
    assert!(!err.contains("tool_execution delete_file"), "{err}");
    assert!(out.contains("I may not delete it."), "{out}");
    assert!(
        tool_results(&model)[0].contains("may not delete"),
        "{:?}",
        tool_results(&model)
    );

    // A permission gate answered at the terminal: `y` approves, the tool runs once.
    let model = server([
        Reply::tool_call(
            "write_file",
            json!({ "path": "notes.txt", "content": "hello" }),
        ),
        Reply::text("written"),
    ])
    .await;
    let (out, _) = run(&bin, "gate", &model, "y\n").await;
    assert!(out.contains("write_file"), "{out}");
    assert!(out.contains("Done"), "{out}");
    assert_eq!(
        tool_results(&model),
        vec!["wrote 5 bytes to notes.txt".to_owned()]
    );

    // Restore after the drop, then the journal from its first event to the caught-up mark.
    let model = server([Reply::text("blue")]).await;
    let (out, _) = run(&bin, "restore", &model, "").await;
    assert!(out.contains(r#"answer: Ok("blue")"#), "{out}");
    assert!(out.contains("history: 2 messages"), "{out}");
    assert!(out.contains("session_restored"), "{out}");
    assert!(out.contains("caught up at #"), "{out}");
    assert_eq!(
        model.requests().len(),
        1,
        "restoring asks the model nothing"
    );
}
