//! The session API end to end against the scripted server: a tool turn, queued inputs,
//! the bounded queue, shutdown, and bad endpoints that fail a turn but not the session.

use crate::common;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_event::{Block, EventFilter, EventKind, Role};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{FnTool, RetryPolicy, SessionBuilder, SubmitError, ToolError, TurnOutcome};

#[derive(Deserialize, JsonSchema)]
struct Echo {
    i: serde_json::Value,
}

fn builder(url: &str, dir: &tempfile::TempDir) -> SessionBuilder {
    common::session(url, dir)
        .retry(RetryPolicy {
            max_retries: 1,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        })
        .tool(FnTool::new("echo", "Returns i.", |a: Echo| async move {
            Ok::<_, ToolError>(a.i.to_string())
        }))
}

#[tokio::test]
async fn a_tool_turn_commits_calls_results_and_answer() {
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("echo", json!({ "i": 41 })).usage(10, 2),
        Reply::text("It is 41.").usage(14, 3),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = builder(server.base_url(), &dir).start().await.unwrap();
    let report = session.turn("what is i?").run().await.unwrap();
    assert_eq!(
        report.outcome,
        TurnOutcome::Done {
            text: "It is 41.".into()
        }
    );
    assert_eq!(report.steps, 2);
    assert_eq!(report.usage.prompt_tokens, 24);
    let history = session.history().await.unwrap();
    assert_eq!(
        history.iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(
        history[2].content,
        vec![Block::ToolResult {
            call_id: "call_0".into(),
            content: "41".into(),
            is_error: false
        }]
        .into_iter()
        .map(|mut b| {
            if let Block::ToolResult { call_id, .. } = &mut b {
                *call_id = match &history[1].content[..] {
                    [.., Block::ToolUse { id, .. }] => id.clone(),
                    _ => call_id.clone(),
                };
            }
            b
        })
        .collect::<Vec<_>>()
    );
    // The second request carried the tool result back to the model.
    let second = &server.requests()[1].body;
    assert_eq!(
        second["messages"].as_array().unwrap().last().unwrap()["role"],
        "tool"
    );
    assert_eq!(second["stream_options"]["include_usage"], true);
    session.shutdown().await;
}

#[tokio::test]
async fn inputs_queue_behind_the_running_turn_and_a_full_queue_rejects() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("first").block_after(1),
        Reply::text("second"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = builder(server.base_url(), &dir)
        .queue_capacity(1)
        .start()
        .await
        .unwrap();
    let mut events = session.subscribe(EventFilter::enduring_only());
    let first = session.turn("one").submit().await.unwrap();
    let second = session.turn("two").submit().await.unwrap();
    let third = session.turn("three").submit().await;
    assert!(
        matches!(third, Err(SubmitError::QueueFull { capacity: 1, .. })),
        "{third:?}"
    );
    assert!(server.wait_requests(1, Duration::from_secs(10)).await);
    session.interrupt().await.unwrap();
    let mut seen = Vec::new();
    while let Some(Ok(d)) = events.next().await {
        seen.push((d.event.kind.name(), d.event.header.cause));
        if matches!(d.event.kind, EventKind::TurnDone { .. }) {
            break;
        }
    }
    let names: Vec<_> = seen.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "turn_started",
            "input_cancelled",
            "turn_interrupted",
            "turn_started",
            "step_done",
            "turn_done"
        ]
    );
    assert_eq!(seen[0].1, Some(treadle_event::Cause::Input(first)));
    assert_eq!(seen[5].1, Some(treadle_event::Cause::Input(second)));
    session.shutdown().await;
    assert!(matches!(
        session.turn("late").submit().await,
        Err(SubmitError::Closed)
    ));
}

#[tokio::test]
async fn bad_endpoints_fail_the_turn_naming_endpoint_and_cause_then_recover() {
    // Connection refused: bind a port, then free it.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let session = builder(&refused, &dir).start().await.unwrap();
    let report = session.turn("hello").run().await.unwrap();
    let TurnOutcome::Failed { error, .. } = &report.outcome else {
        panic!("{report:?}")
    };
    assert!(
        error.contains(&refused) && error.to_lowercase().contains("connect"),
        "{error}"
    );
    session.shutdown().await;

    for (reply, cause) in [
        (
            Reply::status(401).body(r#"{"error":{"message":"bad key"}}"#),
            "401",
        ),
        (Reply::malformed(), "JSON"),
    ] {
        let server = ScriptedServer::start(Script::new([reply, Reply::text("back to normal")]))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let session = builder(server.base_url(), &dir).start().await.unwrap();
        let report = session.turn("hello").run().await.unwrap();
        let TurnOutcome::Failed { error, .. } = &report.outcome else {
            panic!("{report:?}")
        };
        assert!(
            error.contains(server.base_url()) && error.contains(cause),
            "{error}"
        );
        let next = session.turn("again").run().await.unwrap();
        assert_eq!(next.answer().ok(), Some("back to normal"));
        session.shutdown().await;
    }
}

#[tokio::test]
async fn a_seeded_turn_starts_with_the_calls_it_was_given_committed_and_restored() {
    let server = ScriptedServer::start(Script::new([Reply::text("Run go vet.")]))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A step limit of one model call: the seed's step makes none and is not charged.
    let session = builder(server.base_url(), &dir)
        .max_steps(1)
        .start()
        .await
        .unwrap();
    let seed = vec![treadle_session::SeededCall::new(
        "ctx_0",
        "read_file",
        json!({"path": "RULES.md"}),
        "always run go vet",
    )];
    let report = session
        .turn("State the rule.")
        .seeded(seed)
        .run()
        .await
        .unwrap();
    assert_eq!(report.answer().unwrap(), "Run go vet.");
    assert_eq!(report.steps, 1, "model calls only");
    // The model's one request: the input, then the call and its result.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(messages[1]["tool_calls"][0]["id"], "ctx_0");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "read_file"
    );
    assert_eq!(messages[2]["tool_call_id"], "ctx_0");
    assert_eq!(messages[2]["content"], "always run go vet");
    // Committed by the loop as a step of its own (no model), and a restore rebuilds it.
    let history = session.history().await.unwrap();
    assert_eq!(
        history.iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    let journal = session.journal().read(session.id(), 0, None).unwrap();
    let steps: Vec<(u32, String)> = journal
        .iter()
        .filter_map(|(_, e)| match &e.kind {
            EventKind::StepDone { index, model, .. } => Some((*index, model.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0], (0, String::new()));
    let id = session.id();
    session.shutdown().await;
    drop(session);
    let restored = builder(server.base_url(), &dir).restore(id).await.unwrap();
    assert_eq!(restored.history().await.unwrap(), history);
    restored.shutdown().await;
}
