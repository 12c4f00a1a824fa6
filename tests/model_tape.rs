//! `treadle run --record DIR` and `--replay-model DIR`: a run recorded against the scripted
//! server replays with no server and prints the same transcript; a changed prompt fails
//! naming the step and the first difference; and a real-model session of the quickstart,
//! recorded once in tests/tapes/, replays and passes its asserts.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Fixture, Run, dead_url, example};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

/// The `--json` lines of a run without what differs between runs: the run id and
/// durations.
fn transcript(run: &Run) -> Vec<Value> {
    events(&run.stdout())
}

fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut event: Value = serde_json::from_str(l).expect("json line");
            if let Some(obj) = event.as_object_mut() {
                obj.remove("run");
                obj.remove("duration_ms");
                // The one-line rendering (`summary`) is derived from the other fields and
                // was added to `--json` after the pinned transcript was recorded.
                obj.remove("summary");
                // When each agent event was shown: a time of this run, not of the tape.
                obj.remove("at_ms");
            }
            event
        })
        // The prompts and each model call's times were added to `--json` after the pinned
        // transcript was recorded; the times are this run's (the tape has no clock).
        .filter(|e| e["what"] != "prompt" && e["what"] != "model_call")
        .collect()
}

/// The agent events `what` of a `--json` transcript, their times left out.
fn timing(run: &Run, what: &str) -> Vec<Value> {
    run.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["what"] == what)
        .map(|e| {
            let mut data = e["data"].clone();
            if let Some(obj) = data.as_object_mut() {
                obj.retain(|k, _| !k.ends_with("_ms"));
            }
            data
        })
        .collect()
}

async fn treadle(f: Fixture, args: Vec<String>, url: String) -> (Fixture, Run) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = f.treadle_env(&args, &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
}

/// Records the quickstart on the scripted server. The first tool call comes with no id,
/// so the session makes one up at random: replay must still match.
async fn record_quickstart(tape: &Path) -> Run {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_calls([ToolCall::new("read_file", json!({"path": "inbox/note.txt"})).id("")]),
        Reply::text("The code word is PELICAN.").usage(40, 8),
    ]))
    .await
    .expect("server");
    let url = server.base_url().to_owned();
    let args = ["run", "--json", "--record"].map(str::to_owned);
    let args = [args.as_slice(), &[tape.display().to_string()]].concat();
    let (_f, run) = treadle(Fixture::new(&example("quickstart.yml")), args, url).await;
    assert_eq!(server.request_count(), 2);
    run
}

fn replay_args(tape: &Path) -> Vec<String> {
    vec![
        "run".into(),
        "--json".into(),
        "--replay-model".into(),
        tape.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn recorded_run_replays_without_a_server() {
    let tapes = tempfile::tempdir().expect("temp dir");
    let recorded = record_quickstart(tapes.path()).await;
    recorded.expect_code(0);
    let step = tapes.path().join("quickstart").join("reader");
    for n in 1..=2 {
        assert!(
            step.join(format!("00{n}.request.json")).is_file(),
            "call {n}"
        );
        assert!(
            step.join(format!("00{n}.response.sse")).is_file(),
            "call {n}"
        );
    }
    assert!(!step.join("003.request.json").exists());

    // A fresh directory, and the server gone.
    let f = Fixture::new(&example("quickstart.yml"));
    let (f, replayed) = treadle(f, replay_args(tapes.path()), dead_url()).await;
    replayed.expect_code(0);
    assert_eq!(transcript(&recorded), transcript(&replayed));
    // The replay tells the model the same, and its calls spend the same tokens.
    let prompts = timing(&replayed, "prompt");
    assert_eq!(prompts.len(), 2, "the system prompt and the prompt");
    assert_eq!(timing(&recorded, "prompt"), prompts);
    assert_eq!(
        timing(&recorded, "model_call"),
        timing(&replayed, "model_call")
    );
    assert!(
        transcript(&replayed)
            .iter()
            .any(|e| e["what"] == "text" && e["data"] == "The code word is PELICAN."),
        "{}",
        replayed.stdout()
    );
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn edited_prompt_fails_naming_the_step_and_the_difference() {
    let tapes = tempfile::tempdir().expect("temp dir");
    record_quickstart(tapes.path()).await.expect_code(0);
    let edited =
        example("quickstart.yml").replace("Use read_file to read", "Please use read_file to read");
    let (_f, run) = treadle(Fixture::new(&edited), replay_args(tapes.path()), dead_url()).await;
    // A run whose inputs differ from its recording cannot be replayed: exit code 2.
    run.expect_code(2);
    let all = transcript(&run)
        .iter()
        .find(|e| e["event"] == "step_finished" && e["name"] == "reader")
        .and_then(|e| e["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| run.stdout());
    assert!(all.contains("step `reader`"), "{all}");
    assert!(all.contains("model call 1"), "{all}");
    assert!(
        all.contains("at messages[1].content: expected \"Use read_file to read"),
        "{all}"
    );
    assert!(all.contains("got \"Please use read_file to read"), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_and_unused_calls_fail_the_replay() {
    let tapes = tempfile::tempdir().expect("temp dir");
    record_quickstart(tapes.path()).await.expect_code(0);
    let step = tapes.path().join("quickstart").join("reader");

    // One call more than recorded.
    let moved = |from: &str, to: &str| std::fs::rename(step.join(from), step.join(to)).unwrap();
    moved("002.request.json", "keep.request");
    let f = Fixture::new(&example("quickstart.yml"));
    let (_f, run) = treadle(f, replay_args(tapes.path()), dead_url()).await;
    run.expect_code(2);
    assert!(
        run.stdout().contains("model call 2 was not recorded"),
        "{}",
        run.stdout()
    );
    moved("keep.request", "002.request.json");

    // One recorded call never made.
    std::fs::copy(step.join("002.request.json"), step.join("003.request.json")).unwrap();
    let f = Fixture::new(&example("quickstart.yml"));
    let (_f, run) = treadle(f, replay_args(tapes.path()), dead_url()).await;
    run.expect_code(2);
    assert!(
        run.stderr().contains("step `reader` made 2 of 3"),
        "{}",
        run.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_without_a_recording_is_a_configuration_error() {
    let empty = tempfile::tempdir().expect("temp dir");
    let f = Fixture::new(&example("quickstart.yml"));
    let (_f, run) = treadle(f, replay_args(empty.path()), dead_url()).await;
    run.expect_code(2);
    assert!(
        run.stderr().contains("no recording for job `quickstart`"),
        "{}",
        run.stderr()
    );
}

/// The pinned real-model session: examples/quickstart.yml recorded once against the local
/// model (scripts/local-model) into tests/tapes/quickstart/, with the run's `--json` lines in
/// tests/tapes/quickstart/transcript.jsonl, replayed here with no model running.
///
/// To (re-)record, from the repository root, with the model running:
///
/// ```sh
/// d=$(mktemp -d); cp examples/quickstart.yml "$d/treadle.yml"
/// (cd "$d" && treadle run --json --record "$OLDPWD/tests/tapes" > "$d/transcript.jsonl") &&
///   mv "$d/transcript.jsonl" tests/tapes/quickstart/
/// ```
///
/// (`--record` empties tests/tapes/quickstart first, hence the detour through `$d`.)
#[tokio::test(flavor = "multi_thread")]
async fn pinned_real_model_quickstart_replays() {
    let tapes: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("tapes");
    let pinned = std::fs::read_to_string(tapes.join("quickstart").join("transcript.jsonl"))
        .expect("pinned transcript");
    let expected = events(&pinned);
    let f = Fixture::new(&example("quickstart.yml"));
    let (_f, run) = treadle(f, replay_args(&tapes), dead_url()).await;
    run.expect_code(0);
    let got = transcript(&run);
    assert_eq!(expected, got);
    // The real model really used its tools, and the asserts passed.
    let names: Vec<&Value> = got
        .iter()
        .filter(|e| e["what"] == "tool_call")
        .map(|e| &e["data"]["name"])
        .collect();
    assert!(names.contains(&&json!("read_file")), "{names:?}");
    assert!(
        got.iter().any(|e| e["event"] == "step_finished"
            && e["name"] == "reader"
            && e["status"] == "succeeded"),
        "{}",
        run.stdout()
    );
}
