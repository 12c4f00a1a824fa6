//! The command line through a running `treadle serve`, with the real binary: the must-show
//! flow (`treadle serve examples/`, `treadle run examples/quickstart.yml` in another
//! process, `treadle runs` while it runs), the same transcript as without a server, Ctrl-C
//! cancelling the run in the server, and `plan` answered by the server.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::server::{Server, eventually};
use common::{Fixture, example};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

const TASKS: &str = "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello; sleep 0.1; echo oops >&2\n      - do:\n          - task: a\n            run: echo a\n          - task: b\n            run: echo b\n      - task: last\n        run: exit 3\n";

fn treadle(dir: &std::path::Path, args: &[&str]) -> common::Run {
    common::Run(
        Command::new(env!("CARGO_BIN_EXE_treadle"))
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("run treadle"),
    )
}

/// The transcript without timings, which differ between any two runs.
fn untimed(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let mut out = String::new();
            let mut rest = l;
            while let Some(i) = rest.find(" in ") {
                out.push_str(&rest[..i]);
                let after = &rest[i + 4..];
                if after.starts_with(|c: char| c.is_ascii_digit()) {
                    let end = after.find([' ', ':']).unwrap_or(after.len());
                    rest = &after[end..];
                } else {
                    out.push_str(" in ");
                    rest = after;
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

#[test]
fn a_run_through_the_server_prints_what_a_run_alone_prints() {
    let alone = Fixture::new(TASKS);
    let expected = alone.treadle(&["run"]);
    expected.expect_code(1);
    let served = Fixture::new(TASKS);
    let s = Server::start(served.path(), &[], &[]);
    let through = served.treadle(&["run"]);
    through.expect_code(1);
    assert_eq!(untimed(&through.stdout()), untimed(&expected.stdout()));
    // The same with --json, but for timings (each on a fresh directory: no cache hits).
    let json_alone = Fixture::new(TASKS).treadle(&["run", "--json"]);
    let fresh = Fixture::new(TASKS);
    let s2 = Server::start(fresh.path(), &[], &[]);
    let json_through = fresh.treadle(&["run", "--json"]);
    let strip = |t: &str| -> Vec<serde_json::Value> {
        t.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("json line");
                if let Some(o) = v.as_object_mut() {
                    o.remove("duration_ms");
                }
                v
            })
            .collect()
    };
    assert_eq!(strip(&json_through.stdout()), strip(&json_alone.stdout()));
    drop(s2);
    served.treadle(&["run"]).expect_code(1);
    let runs = served.treadle(&["runs"]);
    runs.expect_code(0);
    assert_eq!(runs.stdout().lines().count(), 3, "{}", runs.stdout());
    let plan = served.treadle(&["plan"]);
    plan.expect_code(0);
    assert!(plan.stdout().contains("job main"), "{}", plan.stdout());
    drop(s);
}

#[tokio::test(flavor = "multi_thread")]
async fn must_show_serve_examples_run_quickstart_and_list_runs_while_it_runs() {
    // Slow tokens keep the run going while `treadle runs` looks at it.
    let model = ScriptedServer::builder()
        .chunk_delay(Duration::from_millis(60))
        .start(Script::new([
            Reply::tool_call("read_file", json!({"path": "inbox/note.txt"})),
            Reply::text("The code word is PELICAN, as the note says plainly.").usage(40, 8),
        ]))
        .await
        .expect("scripted server");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("examples")).expect("examples dir");
    for name in ["quickstart.yml", "hello.yml"] {
        std::fs::write(dir.path().join("examples").join(name), example(name)).expect("copy");
    }
    let url = model.base_url().to_owned();
    let s = Server::start(dir.path(), &["examples/"], &[("TREADLE_LOCAL_URL", &url)]);
    let root = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_treadle"))
            .args(["run", "examples/quickstart.yml"])
            .current_dir(&root)
            .env_remove("TREADLE_LOCAL_URL")
            .stdin(Stdio::null())
            .output()
            .expect("treadle run")
    });
    let root = dir.path().to_path_buf();
    let listed = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        eventually("`treadle runs` to list the running run", || {
            let runs = treadle(&root, &["runs", "examples/quickstart.yml"]);
            runs.expect_code(0);
            seen = runs.stdout();
            seen.lines()
                .any(|l| l.contains("running") && l.contains("quickstart"))
        });
        seen
    })
    .await
    .expect("runs");
    assert!(listed.contains("    1  running"), "{listed}");
    let out = common::Run(run.await.expect("run thread"));
    out.expect_code(0);
    let text = out.stdout();
    assert!(text.contains("run 1 · job quickstart"), "{text}");
    assert!(text.contains("→ read_file"), "{text}");
    assert!(text.contains("PELICAN"), "{text}");
    assert!(text.contains("run 1 succeeded"), "{text}");
    let runs = treadle(dir.path(), &["runs", "examples/quickstart.yml", "--cost"]);
    runs.expect_code(0);
    assert!(runs.stdout().contains("unpriced"), "{}", runs.stdout());
    drop(s);
}

#[test]
fn ctrl_c_cancels_the_run_in_the_server() {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: nap\n        run: echo napping; sleep 30\n",
    );
    let s = Server::start(f.path(), &[], &[]);
    let child = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    eventually("the run to start in the server", || {
        f.treadle(&["runs"]).stdout().contains("running")
    });
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = common::Run(child.wait_with_output().expect("wait"));
    out.expect_code(130);
    assert!(out.stdout().contains("run 1 aborted"), "{}", out.stdout());
    let runs = f.treadle(&["runs"]);
    assert!(runs.stdout().contains("aborted"), "{}", runs.stdout());
    drop(s);
}

#[test]
fn a_stale_discovery_file_is_ignored_and_the_run_works_alone() {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n",
    );
    std::fs::create_dir_all(f.path().join(".treadle")).expect("dir");
    // A server that is gone: nothing listens on the port it named.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    std::fs::write(
        f.path().join(".treadle/server.json"),
        format!("{{\"addr\":\"127.0.0.1:{port}\",\"pid\":4194321,\"token_required\":false}}"),
    )
    .expect("write");
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    assert!(run.stdout().contains("│ hello"), "{}", run.stdout());
    f.treadle(&["runs"]).expect_code(0);
}
