//! Small models at the API's edge, tolerated as pipelines tolerate them, over real HTTP to
//! the scripted server: `TurnRequest::ask` reads an answer in a ```` ```json ```` fence, and a
//! tool call written as text never reaches a stream's consumer as text deltas.

use crate::common;

use treadle_scripted::Reply;
use treadle_session::{Effect, FnTool};

#[treadle_session::schema]
#[derive(Debug, PartialEq)]
struct Verdict {
    approve: bool,
    reason: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_reads_an_answer_in_a_json_fence_the_first_time() {
    let dir = tempfile::tempdir().unwrap();
    let fenced = "```json\n{\"approve\": true, \"reason\": \"tests pass\"}\n```";
    let server = common::server([Reply::text(fenced)]).await;
    let session = common::session(server.base_url(), &dir)
        .start()
        .await
        .unwrap();
    let verdict: Verdict = session
        .turn("Merge it?")
        .ask()
        .await
        .expect("the fenced answer");
    assert_eq!(
        verdict,
        Verdict {
            approve: true,
            reason: "tests pass".into()
        }
    );
    assert_eq!(server.requests().len(), 1, "no retry was needed");
    session.shutdown().await;
}

#[treadle_session::schema]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_written_as_text_never_surfaces_as_text_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let call = "```json\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n```";
    let server = common::server([
        Reply::text(call),
        Reply::text("{\"name\": \"add\", \"arguments\": {\"a\": 5, \"b\": 1}}"),
        Reply::text("The sums are 5 and 6."),
    ])
    .await;
    let add = FnTool::plain("add", "Adds two integers.", |x: Add| x.a + x.b);
    let session = common::session(server.base_url(), &dir)
        .tool(add.effect(Effect::Pure))
        .start()
        .await
        .unwrap();
    let mut turn = session
        .turn("Add 2 and 3, then 5 and 1.")
        .stream()
        .await
        .unwrap();
    let (mut text, mut results) = (String::new(), Vec::new());
    while let Some(item) = turn.next().await {
        let item = item.unwrap();
        if let Some(delta) = item.text_delta() {
            text.push_str(delta);
        }
        if let Some(result) = item.tool_result() {
            results.push(result.content.to_string());
        }
    }
    assert_eq!(results, ["5", "6"], "both text calls ran");
    assert_eq!(
        text, "The sums are 5 and 6.",
        "only the answer was streamed"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_only_looks_like_a_call_is_streamed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let answer = "{\"total\": 5}";
    let server = common::server([Reply::text(answer)]).await;
    let add = FnTool::plain("add", "Adds two integers.", |x: Add| x.a + x.b);
    let session = common::session(server.base_url(), &dir)
        .tool(add)
        .start()
        .await
        .unwrap();
    let mut turn = session.turn("Sum?").stream().await.unwrap();
    let mut text = String::new();
    while let Some(item) = turn.next().await {
        if let Some(delta) = item.unwrap().text_delta() {
            text.push_str(delta);
        }
    }
    assert_eq!(
        text, answer,
        "held back while it might be a call, then published"
    );
    session.shutdown().await;
}
