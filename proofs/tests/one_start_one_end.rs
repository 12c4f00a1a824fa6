//! Rule 6, one-start-one-end: every tool call in a batch gets exactly one `ToolCallStarted`
//! and one `ToolCallCompleted`, and the results stay in call order. A denied or failed call
//! is not an error of the turn: its reason is the tool result the model reads.
//!
//! Each schedule builds a batch from a random mix of calls that succeed, fail, panic, are
//! denied by a guard, name an unknown tool or carry arguments that are not JSON.

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng;
use serde::Deserialize;
use serde_json::json;
use treadle_event::{Block, EventFilter, EventKind, Role};
use treadle_hook::DenyTools;
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ToolCall};
use treadle_session::{FnTool, ToolError};

#[derive(Deserialize, schemars::JsonSchema)]
struct Nothing {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_starts_once_ends_once_and_results_keep_call_order() {
    for seed in 0..SCHEDULES {
        let mut rng = rng(seed);
        let size = rng.random_range(1..7);
        let calls: Vec<ToolCall> = (0..size)
            .map(|i| match rng.random_range(0..6) {
                0 => ToolCall::new("echo", json!({ "i": i })),
                1 => ToolCall::new("fail", json!({})),
                2 => ToolCall::new("explode", json!({})),
                3 => ToolCall::new("forbidden", json!({})),
                4 => ToolCall::new("no_such_tool", json!({})),
                _ => ToolCall::raw("echo", "{not json"),
            })
            .collect();
        let script = Script::new([Reply::tool_calls(calls.clone()), Reply::text("all read")]);
        let world = World::start(script, seed, Duration::from_micros(300)).await;
        let session = world
            .session()
            .tool(FnTool::new("fail", "Always fails.", |_: Nothing| async {
                Err::<String, _>(ToolError::new("the disk is full"))
            }))
            .tool(FnTool::new("explode", "Panics.", |_: Nothing| async {
                if true {
                    panic!("boom");
                }
                Ok::<_, ToolError>(String::new())
            }))
            .tool(FnTool::new(
                "forbidden",
                "Never allowed.",
                |_: Nothing| async { Ok::<_, ToolError>("ran anyway".to_owned()) },
            ))
            .hook(DenyTools::new(["forbidden"], "not on this project"))
            .start()
            .await
            .expect("start");
        let mut sub = session.subscribe(EventFilter::all());
        session.turn("go").submit().await.expect("submit");
        let deliveries = until_terminal(&mut sub).await;
        assert_eq!(
            deliveries.last().map(|d| d.event.kind.name()),
            Some("turn_done"),
            "seed {seed}: {:?}",
            names(&deliveries)
        );

        let mut started: HashMap<String, usize> = HashMap::new();
        let mut completed: HashMap<String, (usize, String)> = HashMap::new();
        let mut order = Vec::new();
        for (at, d) in deliveries.iter().enumerate() {
            match &d.event.kind {
                EventKind::ToolCallStarted { call_id, .. } => {
                    assert!(
                        started.insert(call_id.clone(), at).is_none(),
                        "seed {seed}: {call_id} started twice"
                    );
                }
                EventKind::ToolCallCompleted {
                    call_id, content, ..
                } => {
                    assert!(
                        completed
                            .insert(call_id.clone(), (at, content.clone()))
                            .is_none(),
                        "seed {seed}: {call_id} completed twice"
                    );
                }
                EventKind::StepDone { messages, .. } if messages.len() == 2 => {
                    let uses: Vec<String> =
                        messages[0].tool_uses().map(|u| u.id.to_owned()).collect();
                    assert_eq!(messages[1].role, Role::Tool);
                    let results: Vec<String> = messages[1]
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            Block::ToolResult { call_id, .. } => Some(call_id.clone()),
                            _ => None,
                        })
                        .collect();
                    assert_eq!(results, uses, "seed {seed}: results keep call order");
                    order = messages[1].content.clone();
                }
                _ => {}
            }
        }
        assert_eq!(started.len(), size, "seed {seed}: one Started per call");
        assert_eq!(completed.len(), size, "seed {seed}: one Completed per call");
        for (id, at) in &started {
            assert!(
                completed[id].0 > *at,
                "seed {seed}: {id} completed before it started"
            );
        }
        for (call, result) in calls.iter().zip(&order) {
            let Block::ToolResult {
                content, is_error, ..
            } = result
            else {
                panic!("seed {seed}: not a result")
            };
            let expected_error = match call.name() {
                "fail" => Some("the disk is full"),
                "explode" => Some("panicked: boom"),
                "forbidden" => Some("not on this project"),
                "no_such_tool" => Some("unknown tool"),
                _ if call.arguments().starts_with("{not") => Some("not valid JSON"),
                _ => None,
            };
            match expected_error {
                Some(reason) => assert!(
                    *is_error && content.contains(reason),
                    "seed {seed}: {content}"
                ),
                None => assert!(!is_error, "seed {seed}: {content}"),
            }
        }
        session.shutdown().await;
    }
}
