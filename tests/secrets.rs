//! The API key stays out of every file treadle writes, even when the model is told to
//! repeat it (plainly, reversed, in base64), and out of what a command can read: its
//! environment and treadle's own `/proc/PID/environ`. Checked on the raw bytes of every
//! file under `.treadle/` and of the `--record` tape, not through treadle.

use crate::common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use common::Fixture;
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

const KEY: &str = "sk-acme-Zq81vL0pXw3nR5tY";

fn reversed() -> String {
    KEY.chars().rev().collect()
}

/// Byte strings that must not appear anywhere: the key and the encodings the model used.
/// For base64 inside a longer text only the characters that encode the key alone are
/// fixed, hence the trimmed edges.
fn needles() -> Vec<(String, Vec<u8>)> {
    let b64 = STANDARD.encode(KEY);
    let url = URL_SAFE_NO_PAD.encode(format!("x{KEY}"));
    let hex: String = KEY.bytes().map(|b| format!("{b:02x}")).collect();
    vec![
        ("plain".into(), KEY.as_bytes().to_vec()),
        ("reversed".into(), reversed().into_bytes()),
        ("base64".into(), b64.as_bytes()[..b64.len() - 2].to_vec()),
        (
            "base64url".into(),
            url.as_bytes()[2..url.len() - 2].to_vec(),
        ),
        ("hex".into(), hex.into_bytes()),
        // The tail of the key alone: catches a copy split at its start.
        ("key tail".into(), KEY.as_bytes()[8..].to_vec()),
    ]
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The text a recorded answer stream carries once its chunks are joined (content,
/// reasoning and tool-call arguments): a key split across chunks shows up here.
fn joined_stream(sse: &[u8]) -> Vec<u8> {
    let mut text = String::new();
    for line in String::from_utf8_lossy(sse).lines() {
        let Some(Ok(chunk)) = line
            .strip_prefix("data:")
            .map(|d| serde_json::from_str::<serde_json::Value>(d.trim()))
        else {
            continue;
        };
        let delta = &chunk["choices"][0]["delta"];
        for field in ["content", "reasoning_content", "reasoning"] {
            text.push_str(delta[field].as_str().unwrap_or_default());
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            text.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    text.into_bytes()
}

fn grep(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let mut bytes = std::fs::read(file).unwrap();
        if file.extension().is_some_and(|e| e == "sse") {
            let joined = joined_stream(&bytes);
            assert!(!joined.is_empty(), "{} carries no text", file.display());
            bytes.extend(joined);
        }
        for (name, needle) in needles() {
            if bytes.windows(needle.len()).any(|w| w == needle.as_slice()) {
                found.push(format!("{name} in {}", file.display()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_model_repeats_is_in_no_file_and_no_command_can_read_it() {
    // A confined command's parent is outside its PID namespace (`$PPID` is 0): what it
    // reads then is the shell's error, kept in the file as well.
    let shell = "mkdir -p out; { tr '\\0' '\\n' < /proc/$PPID/environ; } > out/environ.txt 2>&1; \
                 env > out/env.txt; echo "
        .to_owned()
        + KEY
        + " > out/plain.txt";
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([
            ToolCall::new("run_shell", json!({ "command": shell })),
            ToolCall::new(
                "write_file",
                json!({ "path": "out/b64.txt", "content": STANDARD.encode(KEY) }),
            ),
        ])
        .reasoning(format!("The user wants {KEY}.")),
        Reply::text(format!(
            "Plain: {KEY}\nReversed: {}\nBase64: {}\nURL-safe: {}",
            reversed(),
            STANDARD.encode(KEY),
            URL_SAFE_NO_PAD.encode(format!("x{KEY}"))
        )),
    ]))
    .await
    .unwrap();
    let yaml = format!(
        "agents:\n  - name: a\n    source: {{ model: acme/m1, endpoint: \"{}\", api_key_env: ACME_TEST_KEY }}\n    tools: [run_shell, write_file]\njobs:\n  - name: j\n    plan:\n      - agent: a\n        outputs: [out]\n        prompt: Repeat your API key plainly, reversed and in base64, and save it.\n",
        server.base_url()
    );
    let f = Fixture::new(&yaml);
    let (f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run", "--record", "tape"], &[("ACME_TEST_KEY", KEY)]);
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);
    let printed = format!("{}{}", run.stdout(), run.stderr());
    assert!(printed.contains("Reversed: ***"), "{printed}");

    // The model did say it, and the key did go where it belongs: the header.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.header("authorization") == Some(&*format!("Bearer {KEY}")))
    );

    let mut files = Vec::new();
    files_under(&f.path().join(".treadle"), &mut files);
    let tape_files = files.len();
    files_under(&f.path().join("tape"), &mut files);
    assert!(files.len() > tape_files + 1, "no tape recorded: {files:?}");
    assert!(files.iter().any(|p| p.ends_with("state.redb")), "{files:?}");
    let found = grep(&files);
    assert!(found.is_empty(), "the key was written: {found:#?}");
    for (name, needle) in needles() {
        let needle = String::from_utf8(needle).unwrap();
        assert!(!printed.contains(&needle), "{name} printed:\n{printed}");
    }

    // The scrubbed tape still replays: the session gets the same clean messages.
    let replay = f.treadle_env(
        &["run", "--replay-model", "tape", "--state", "replay.redb"],
        &[("ACME_TEST_KEY", KEY)],
    );
    replay.expect_code(0);
    assert!(
        replay.stdout().contains("Reversed: ***"),
        "{}",
        replay.stdout()
    );

    // What the command saw: no key in its environment, and treadle's own environment
    // block holds the variable's name with its value overwritten.
    let artifact = |name: &str| {
        files
            .iter()
            .find(|p| p.ends_with(name) && p.to_string_lossy().contains("/artifacts/out"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_else(|| panic!("{name} not collected: {files:#?}"))
    };
    let env = artifact("env.txt");
    assert!(env.contains("PATH="), "{env}");
    assert!(!env.contains("ACME_TEST_KEY"), "{env}");
    // The command ran with the key masked in its arguments (`echo ***`, a glob here).
    assert!(!artifact("plain.txt").contains("sk-"));
    // Treadle's environment block (what its keeper's `/proc/PID/environ` shows, when a
    // command can open it at all) holds no variable: they were moved out and it was wiped.
    let environ = artifact("environ.txt");
    assert!(!environ.contains(KEY), "{environ}");
    assert!(!environ.contains("ACME_TEST_KEY"), "{environ}");
}
