//! Calls of one batch that touch the same file run in the model's order (issue 26, item 1):
//! random batches of `read_file`, `write_file`, `edit_file` and `list_dir` calls on a few
//! paths, sent by the scripted model over real HTTP in one reply and run by the session's
//! batch runner on the built-in tools, give the same results and leave the same files as
//! the same calls sent one per reply, one by one.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use treadle::tools::{Workspace, grant};
use treadle_event::{Block, Role};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::Session;

const PATHS: [&str; 3] = ["a.txt", "b.txt", "d/c.txt"];
const TEXTS: [&str; 4] = ["x", "y", "xy", "x\nx"];

fn call() -> impl Strategy<Value = (String, Value)> {
    let path = prop::sample::select(PATHS.to_vec());
    let text = prop::sample::select(TEXTS.to_vec());
    prop_oneof![
        path.clone()
            .prop_map(|p| ("read_file".to_owned(), json!({ "path": p }))),
        (path.clone(), text.clone())
            .prop_map(|(p, t)| ("write_file".to_owned(), json!({ "path": p, "content": t }))),
        (path, text.clone(), text).prop_map(|(p, old, new)| (
            "edit_file".to_owned(),
            json!({ "path": p, "old_string": old, "new_string": new })
        )),
        prop::sample::select(vec![".", "d"])
            .prop_map(|p| ("list_dir".to_owned(), json!({ "path": p }))),
    ]
}

/// The step directory every run starts from.
fn seed(dir: &Path) {
    std::fs::create_dir_all(dir.join("d")).expect("d/");
    std::fs::write(dir.join("a.txt"), "x").expect("a.txt");
    std::fs::write(dir.join("d/c.txt"), "y").expect("c.txt");
}

/// Runs `calls` in a fresh directory, `batched` in one model reply or one reply each; the
/// tool results in call order, and the files left.
async fn run(calls: &[(String, Value)], batched: bool) -> (Vec<(String, bool)>, Vec<String>) {
    let dir = tempfile::tempdir().expect("dir");
    let work = dir.path().join("work");
    seed(&work);
    let tool_calls = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall::new(name, args.clone()).id(format!("c{i}")));
    let mut replies: Vec<Reply> = if batched {
        vec![Reply::tool_calls(tool_calls)]
    } else {
        tool_calls.map(|c| Reply::tool_calls([c])).collect()
    };
    replies.push(Reply::text("done"));
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("scripted server");
    let ws = Workspace::new(&work).expect("workspace");
    let names = ["read_file", "write_file", "edit_file", "list_dir"];
    let session = Session::builder()
        .endpoint(server.base_url())
        .model("scripted")
        .journal_path(dir.path().join("j.redb"))
        .tools(grant(&names, &ws).expect("tools"))
        .max_steps(calls.len() as u32 + 2)
        // The repeat watch treats identical calls in one batch as one request and the same
        // call in later steps as a loop (its note is added to the result), so the two runs
        // differ by design once a call repeats past the limit: off, as this property is
        // about the tools' results and their order.
        .repeat_limit(0)
        .start()
        .await
        .expect("session");
    let report = tokio::time::timeout(Duration::from_secs(60), session.turn("go").run())
        .await
        .expect("the turn ends")
        .expect("a report");
    assert!(report.is_done(), "{report:?}");
    let results = session
        .history()
        .await
        .expect("history")
        .into_iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| m.content)
        .filter_map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => Some((content, is_error)),
            _ => None,
        })
        .collect();
    session.shutdown().await;
    let files = PATHS
        .iter()
        .map(|p| std::fs::read_to_string(work.join(p)).unwrap_or_else(|_| "<none>".into()))
        .collect();
    (results, files)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_gives_the_results_of_its_calls_run_one_by_one(
        calls in prop::collection::vec(call(), 2..9)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("runtime");
        let (batched, one_by_one) = runtime.block_on(async {
            (run(&calls, true).await, run(&calls, false).await)
        });
        prop_assert_eq!(batched.0.len(), calls.len());
        prop_assert_eq!(batched, one_by_one, "calls: {:?}", calls);
    }
}
