//! A server killed in the middle of a run goes on with it when it starts again, against the
//! real binary and the scripted model (the writer of `agent_resume`: three `write_file`
//! calls, the third answered never, then `done`):
//!
//! * `a_killed_server_started_again_goes_on_with_its_run_under_the_same_id`: SIGKILL while
//!   the model answers the third request; the next `treadle serve` on the state file adopts
//!   the run: same id, it succeeds, the model is asked nothing it had answered for a
//!   committed step, the files are all there, and the event stream read from 0 has ids
//!   1..=N with no gap and one start, beginning with the events a follower saw of the
//!   run's start before the kill, and each of the step's calls once;
//! * `no_adopt_leaves_the_run_interrupted_and_resumable`: with `--no-adopt` the run stays as
//!   it was, and the API, `treadle runs` through the server, and `treadle runs` alone say
//!   "interrupted — resumable".

use crate::agent_resume::{PIPELINE, results, writer};
use crate::common;

use std::time::Duration;

use common::Fixture;
use common::nats::wait_status;
use common::server::{Server, get, post};
use futures::StreamExt;
use serde_json::json;
use treadle::server::client::{SseEvent, SseParser};
use treadle_scripted::ScriptedServer;

/// The run's events from after `after`, read until the stream ends or `quiet` passes
/// without one.
async fn read_events(s: &Server, run: u64, after: u64, quiet: Duration) -> Vec<SseEvent> {
    let r = s
        .http()
        .get(s.url(&format!("/api/v1/runs/{run}/events")))
        .header("Last-Event-ID", after.to_string())
        .send()
        .await
        .expect("GET events");
    assert_eq!(r.status().as_u16(), 200);
    let (mut parser, mut out, mut body) = (SseParser::default(), Vec::new(), r.bytes_stream());
    while let Ok(Some(chunk)) = tokio::time::timeout(quiet, body.next()).await {
        for e in parser.feed(&chunk.expect("chunk")) {
            if e.event == "end" {
                return out;
            }
            if e.event != "token" {
                out.push(e);
            }
        }
    }
    out
}

/// Starts the writer's run on a server, and kills the server while the model answers the
/// third request; the model, the fixture, the run and the events a follower saw.
async fn killed_mid_step() -> (ScriptedServer, Fixture, u64, Vec<SseEvent>) {
    let model = ScriptedServer::start(writer()).await.expect("model");
    let f = Fixture::new(PIPELINE);
    let env = [("TREADLE_LOCAL_URL", model.base_url())];
    let first = Server::start(f.path(), &["treadle.yml"], &env);
    let (code, body) = post(&first, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    assert!(
        model.wait_requests(3, Duration::from_secs(60)).await,
        "the model was never asked for out/c"
    );
    let seen = read_events(&first, run, 0, Duration::from_millis(500)).await;
    drop(first); // SIGKILL
    assert_eq!(model.request_count(), 3);
    (model, f, run, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_server_started_again_goes_on_with_its_run_under_the_same_id() {
    let (model, f, run, seen) = killed_mid_step().await;
    assert!(!seen.is_empty(), "a follower saw the run start");
    let env = [("TREADLE_LOCAL_URL", model.base_url())];
    let second = Server::start(f.path(), &["treadle.yml"], &env);
    let done = wait_status(&second, run, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let after: Vec<usize> = model.requests()[3..]
        .iter()
        .map(|r| results(&r.body))
        .collect();
    assert_eq!(
        after,
        vec![2, 3],
        "only the request in flight was asked again"
    );
    let all = read_events(&second, run, 0, Duration::from_secs(10)).await;
    let ids: Vec<u64> = all.iter().map(|e| e.id.unwrap_or_default()).collect();
    let expected: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(ids, expected, "every event once, in order, no gap");
    // What the state file had synced before the kill (up to the step's session start,
    // which syncs) is the stream's start; later events may be renumbered.
    let started = |e: &SseEvent| e.data.contains("\"step_started\"");
    let kept = seen.iter().position(started).expect("the step had started") + 1;
    assert_eq!(
        seen[..kept],
        all[..kept],
        "what a follower saw of the run's start is the stream's start"
    );
    let text: String = all.iter().map(|e| e.data.clone()).collect();
    assert_eq!(text.matches("\"run_started\"").count(), 1, "{text}");
    assert!(text.contains("goes on with it"), "{text}");
    assert!(text.contains("files:ABC"), "every file was there: {text}");
    // Each call once: those the killed server had shown but not synced are shown again
    // from the step's session journal, those it had synced are not.
    let calls: Vec<&str> = all
        .iter()
        .filter(|e| e.data.contains("\"what\":\"tool_call\""))
        .map(|e| e.data.as_str())
        .collect();
    for file in ["out/a", "out/b", "out/c"] {
        let n = calls.iter().filter(|d| d.contains(file)).count();
        assert_eq!(n, 1, "`{file}`'s call in the stream once: {calls:#?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_adopt_leaves_the_run_interrupted_and_resumable() {
    let (model, f, run, _) = killed_mid_step().await;
    let env = [("TREADLE_LOCAL_URL", model.base_url())];
    let second = Server::start(f.path(), &["treadle.yml", "--no-adopt"], &env);
    let (_, view) = get(&second, &format!("/api/v1/runs/{run}")).await;
    assert_eq!(view["status"], "running", "{view}");
    assert_eq!(view["interrupted"], true, "{view}");
    let listed = f.treadle(&["runs"]).stdout();
    assert!(listed.contains("interrupted — resumable"), "{listed}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(model.request_count(), 3, "nothing went on");
    second.stop();
    let alone = f.treadle(&["runs"]).stdout();
    assert!(alone.contains("interrupted — resumable"), "{alone}");
}
