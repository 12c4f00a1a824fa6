//! Rule 9, restore-exact: restoring a session from its journal yields exactly the committed
//! history, and a turn that was in flight at a crash is closed at restore with
//! `TurnInterrupted`.
//!
//! A child process runs a session (tool steps with random delays, random chunk jitter) and
//! is killed with SIGKILL at a random moment — mid-stream, mid-tool or mid-commit. The
//! session is then restored in this process from the journal the child left behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use treadle_event::{Block, EventKind, Role, SessionId};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{Journal, Session, TurnOutcome};

/// Four echo steps per turn, then text; after a restore, a plain answer.
fn script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        if messages[last_user]["content"]
            .as_str()
            .is_some_and(|c| c.contains("after restore"))
        {
            return Reply::text("restored and answering");
        }
        let tools = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        if tools < 4 {
            Reply::text(format!("step {tools} "))
                .with_tool_calls([ToolCall::new("echo", json!({ "i": tools }))])
        } else {
            Reply::text("four echoes done")
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_at_random_points_restores_exactly() {
    let child_bin = env!("CARGO_BIN_EXE_treadle-crash-child");
    let mut interrupted_turns = 0;
    for seed in 0..SCHEDULES {
        let server = ScriptedServer::builder()
            .jitter(Duration::ZERO, Duration::from_millis(2), seed)
            .start(script())
            .await
            .expect("server");
        let dir = tempfile::tempdir().expect("dir");
        let journal_path = dir.path().join("journal.redb");

        let mut child = Command::new(child_bin)
            .args([
                server.base_url(),
                journal_path.to_str().expect("utf-8 path"),
                &seed.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a first line").expect("read");
        let session: SessionId = first
            .strip_prefix("session ")
            .expect("session line")
            .parse()
            .expect("id");
        // Let the child get a random distance into its work, then kill it.
        let wait = pick(&mut rng(seed), 0..120);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        // What the journal committed, read before restore appends anything.
        let (expected, open_turns) = {
            let journal = Journal::open(&journal_path).expect("reopen after crash");
            let events = journal.read(session, 0, None).expect("read");
            let mut open = 0i64;
            for (_, e) in &events {
                match &e.kind {
                    EventKind::TurnStarted { .. } => open += 1,
                    k if k.terminal().is_some() => open -= 1,
                    _ => {}
                }
            }
            (history_from_journal(&journal, session), open)
        };
        assert!(
            (0..=1).contains(&open_turns),
            "seed {seed}: at most one turn in flight"
        );
        assert_groups_complete(seed, &expected);

        let restored = Session::builder()
            .endpoint(server.base_url())
            .model("scripted")
            .journal_path(&journal_path)
            .tool(echo_tool(seed))
            .restore(session)
            .await
            .expect("restore");
        assert_eq!(
            restored.history().await.expect("history"),
            expected,
            "seed {seed}: restored history is exactly the journal's"
        );

        let after: Vec<_> = restored
            .journal()
            .read(session, 0, None)
            .expect("read")
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        let started = after
            .iter()
            .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
            .count();
        let terminals = after.iter().filter(|e| e.kind.terminal().is_some()).count();
        assert_eq!(
            started, terminals,
            "seed {seed}: every turn has exactly one terminal after restore"
        );
        if open_turns == 1 {
            interrupted_turns += 1;
            let last = after
                .iter()
                .rev()
                .find(|e| e.kind.terminal().is_some())
                .expect("terminal");
            assert!(
                matches!(last.kind, EventKind::TurnInterrupted { .. }),
                "seed {seed}: the in-flight turn is closed as interrupted"
            );
        }

        // The restored session carries on from the restored history.
        let report = restored
            .turn("after restore: are you there?")
            .run()
            .await
            .expect("run");
        assert_eq!(
            report.outcome,
            TurnOutcome::Done {
                text: "restored and answering".into()
            },
            "seed {seed}"
        );
        let last_request = server.requests().last().expect("request").body.clone();
        let sent = last_request["messages"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0);
        assert_eq!(
            sent,
            expected.iter().map(api_messages).sum::<usize>() + 1,
            "seed {seed}: the model saw the restored history"
        );
        restored.shutdown().await;
    }
    assert!(
        interrupted_turns > 0,
        "at least one kill landed inside a turn"
    );
}

/// Every assistant message with tool calls is followed by one result per call.
fn assert_groups_complete(seed: u64, history: &[treadle_event::Message]) {
    for (i, message) in history.iter().enumerate() {
        let calls = message.tool_uses().count();
        if message.role == Role::Assistant && calls > 0 {
            let results = history.get(i + 1).map(|m| {
                m.content
                    .iter()
                    .filter(|b| matches!(b, Block::ToolResult { .. }))
                    .count()
            });
            assert_eq!(
                results,
                Some(calls),
                "seed {seed}: a partial step group was restored"
            );
        }
    }
}

/// How many chat messages one history message becomes on the wire.
fn api_messages(message: &treadle_event::Message) -> usize {
    match message.role {
        Role::Tool => message.content.len(),
        _ => 1,
    }
}
