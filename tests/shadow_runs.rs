//! `treadle run --shadow RUN`: a recorded run's agent steps again on another model, against
//! the scripted server; the changed tool call reported at the step where it changed, and
//! nothing outside the scratch directories touched.

use crate::common;

use common::{Fixture, Run};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

const PIPELINE: &str = "agents:\n  - name: reader\n    tools: [read_file, write_file]\njobs:\n  - name: j\n    plan:\n      - task: prepare\n        outputs: [work]\n        run: echo \"alpha notes\" > work/notes.txt\n      - agent: reader\n        name: first\n        inputs: [work]\n        prompt: Read work/notes.txt.\n      - agent: reader\n        name: second\n        inputs: [work]\n        outputs: [out]\n        prompt: Summarize work/notes.txt to out/s.md\n        verdicts: [approve, reject]\n        assert:\n          files: [out/s.md]\n";

fn read() -> Reply {
    Reply::tool_call("read_file", json!({"path": "work/notes.txt"}))
}

async fn in_dir(f: &Fixture, args: &[&str], url: &str) -> Run {
    let (dir, url) = (f.path().to_path_buf(), url.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"));
        cmd.args(&args)
            .current_dir(dir)
            .env("TREADLE_LOCAL_URL", url)
            .env_remove("OPENAI_API_KEY");
        Run(cmd.output().expect("run treadle"))
    })
    .await
    .expect("thread")
}

/// Every file under `dir` with its bytes, for "nothing changed" checks.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.display().to_string(),
                    std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_tool_call_is_reported_at_its_step() {
    let original = ScriptedServer::start(Script::new([
        read(),
        Reply::text("read it").usage(100, 10),
        read(),
        Reply::tool_call(
            "write_file",
            json!({"path": "out/s.md", "content": "summary"}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
        Reply::text("ok").usage(100, 10),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(PIPELINE);
    in_dir(&f, &["run"], original.base_url())
        .await
        .expect_code(0);
    let before = snapshot(f.path());

    let shadow = ScriptedServer::start(Script::new([
        read(),
        Reply::text("read it again").usage(50, 5),
        read(),
        Reply::tool_call("write_file", json!({"path": "out/s.md", "content": "x"})),
        Reply::tool_call("verdict", json!({"verdict": "reject", "reason": "unsure"})),
        Reply::text("no").usage(50, 5),
    ]))
    .await
    .expect("server");
    let run = in_dir(
        &f,
        &[
            "run",
            "--shadow",
            "1",
            "--model",
            "local/shadow-model",
            "--json",
        ],
        shadow.base_url(),
    )
    .await;
    // A changed verdict: exit 1, for CI. (The shadow writes the file its step's
    // `assert: files:` demands: a verdict is not taken while that file is owed.)
    run.expect_code(1);
    let report: Value = serde_json::from_str(&run.stdout()).expect("one JSON document");
    let steps = report["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{report:#}");

    let first = &steps[0];
    assert_eq!(first["name"], "first");
    assert_eq!(first["first_difference"], Value::Null, "{first:#}");
    assert_eq!(first["replayed_calls"], 1);
    assert_eq!(first["live_calls"], 0);
    assert_eq!(first["model"], "shadow-model");

    let second = &steps[1];
    assert_eq!(second["name"], "second");
    let diff = &second["first_difference"];
    assert_eq!(diff["index"], 1, "{second:#}");
    assert_eq!(diff["original"]["arguments"]["content"], "summary");
    assert_eq!(diff["shadow"]["arguments"]["content"], "x");
    assert_eq!(second["original_verdict"], "approve");
    assert_eq!(second["shadow_verdict"], "reject");
    assert_eq!(second["verdict_changed"], true);
    assert!(
        second["failing_asserts"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{second:#}"
    );
    assert_eq!(
        (
            second["replayed_calls"].clone(),
            second["live_calls"].clone()
        ),
        (json!(1), json!(1))
    );
    assert_eq!(second["original"]["tokens"], 110);
    assert_eq!(second["shadow"]["tokens"], 55);

    // The model got the recorded result of the call answered from the recording.
    let bodies: Vec<String> = shadow
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(bodies[1].contains("alpha notes"), "{}", bodies[1]);
    assert!(
        shadow
            .requests()
            .iter()
            .all(|r| r.body["model"] == "shadow-model")
    );

    // Nothing outside the scratch directories changed: the state file, the run's
    // artifacts, the pipeline's directory.
    assert_eq!(snapshot(f.path()), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_text_report_and_an_unknown_run() {
    let original = ScriptedServer::start(Script::new([
        read(),
        Reply::text("read it"),
        read(),
        Reply::tool_call(
            "write_file",
            json!({"path": "out/s.md", "content": "summary"}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
        Reply::text("ok"),
    ]))
    .await
    .expect("server");
    let f = Fixture::new(PIPELINE);
    in_dir(&f, &["run"], original.base_url())
        .await
        .expect_code(0);
    // The same answers again: nothing changes, exit 0.
    let same = ScriptedServer::start(Script::new([
        read(),
        Reply::text("read it"),
        read(),
        Reply::tool_call(
            "write_file",
            json!({"path": "out/s.md", "content": "summary"}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
        Reply::text("ok"),
    ]))
    .await
    .expect("server");
    let run = in_dir(&f, &["run", "--shadow", "1"], same.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("step 2 second"), "{out}");
    assert!(out.contains("calls: same as recorded"), "{out}");
    assert!(out.contains("verdict: approve (unchanged)"), "{out}");
    assert!(out.contains("0 with a changed outcome"), "{out}");

    let missing = in_dir(&f, &["run", "--shadow", "9"], same.base_url()).await;
    missing.expect_code(2);
    assert!(
        missing.stderr().contains("there is no run 9"),
        "{}",
        missing.stderr()
    );
}
