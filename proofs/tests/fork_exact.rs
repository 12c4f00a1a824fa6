//! Rule 14, fork-exact: forking never changes the parent's history, a fork's history is
//! the parent's up to the fork point, and a fork (or its parent) restores exactly.
//!
//! A child process (`treadle-fork-child`) runs a seeded random sequence of turns,
//! interrupted turns, forks at random committed points, and shutdowns with restores, over a
//! session and its forks, and is killed with SIGKILL after a random operation, mid-turn,
//! mid-fork or mid-restore. Then, from the journal it left behind, in this process:
//!
//! * every input a session's own turns journaled names that session (so nothing another
//!   session did, a fork least of all, was written into it), and each of its turns starts
//!   once: a fork's copies never land in its parent;
//! * a fork's `SessionStarted` is followed by exactly `copied` copies of its parent's
//!   history events through `through_seq` (same kinds, turn, step and input ids, in order),
//!   so a crash left either a whole fork or none;
//! * every session restores to exactly the history its journal holds, and a fork's
//!   restored history begins with its parent's history through the fork point.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use treadle_event::{Event, EventKind, ForkLink, Message, SessionId};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{Journal, Session};

/// "... steps N": N echo steps, then text.
fn script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let input = messages[last_user]["content"].as_str().unwrap_or_default();
        let wanted: usize = input
            .rsplit("steps ")
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let done = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        if done < wanted {
            Reply::text(format!("step {done} "))
                .with_tool_calls([ToolCall::new("echo", serde_json::json!({ "i": done }))])
        } else {
            Reply::text(format!("{wanted} steps done"))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_killed_at_random_points_never_change_a_parent_and_restore_exactly() {
    let child_bin = env!("CARGO_BIN_EXE_treadle-fork-child");
    let (mut forks, mut sessions) = (0, 0);
    for seed in 0..SCHEDULES {
        let server = ScriptedServer::builder()
            .jitter(Duration::ZERO, Duration::from_millis(1), seed)
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
        // Kill after a random operation has begun, a random while into it.
        let mut rng = rng(seed);
        let target = format!("op {}", pick(&mut rng, 1..40));
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        for line in lines {
            let line = line.expect("read");
            if line == target || line == "done" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_micros(pick(&mut rng, 0..4000))).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        let journal = Journal::open(&journal_path).expect("reopen after the kill");
        let ids = journal.sessions().expect("sessions");
        for &id in &ids {
            let events = journaled(&journal, id);
            if let Some(link) = check_session(seed, id, &events) {
                check_copies(seed, &journal, id, &link, &events);
                forks += 1;
            }
        }
        for &id in &ids {
            check_restore(seed, &server, &journal_path, &journal, id).await;
        }
        sessions += ids.len();
    }
    println!("fork-exact: {sessions} sessions, {forks} of them forks, over {SCHEDULES} kills");
    assert!(forks > SCHEDULES as usize, "the sequences forked");
}

/// The session's own turns name it, and each turn starts once. Returns its fork link.
fn check_session(seed: u64, id: SessionId, events: &[Event]) -> Option<ForkLink> {
    let EventKind::SessionStarted { fork, .. } = &events[0].kind else {
        panic!("seed {seed}: session {id} begins with {:?}", events[0].kind);
    };
    let copied = fork.as_ref().map_or(0, |link| link.copied as usize);
    let mut turns = std::collections::HashSet::new();
    for (at, event) in events.iter().enumerate() {
        let EventKind::TurnStarted { message, .. } = &event.kind else {
            continue;
        };
        let turn = event.header.turn.expect("a turn id");
        assert!(
            turns.insert(turn),
            "seed {seed}: turn {turn} starts twice in session {id}"
        );
        if at > copied {
            let text = message.text_content();
            assert!(
                text.starts_with(&id.to_string()),
                "seed {seed}: session {id} journaled another session's input {text:?}"
            );
        }
    }
    fork.clone()
}

/// The fork's first events are the parent's history events through the fork point.
fn check_copies(seed: u64, journal: &Journal, id: SessionId, link: &ForkLink, events: &[Event]) {
    let parent: Vec<Event> = journal
        .read_range(link.session, ..=link.through_seq, None)
        .expect("read the parent")
        .into_iter()
        .map(|(_, e)| e)
        .filter(|e| is_history(&e.kind))
        .collect();
    let copies = &events[1..=link.copied as usize];
    assert_eq!(
        copies.len(),
        parent.len(),
        "seed {seed}: fork {id} holds {} copies, its parent {} history events through seq {}",
        copies.len(),
        parent.len(),
        link.through_seq
    );
    for (copy, original) in copies.iter().zip(&parent) {
        assert_eq!(copy.kind, original.kind, "seed {seed}: fork {id}");
        assert_eq!(
            (copy.header.turn, copy.header.step, copy.header.cause),
            (
                original.header.turn,
                original.header.step,
                original.header.cause
            ),
            "seed {seed}: fork {id}"
        );
        assert_eq!(copy.header.session, id);
    }
}

/// Restores `id` and compares its history with its journal's, and a fork's with its
/// parent's up to the fork point.
async fn check_restore(
    seed: u64,
    server: &ScriptedServer,
    path: &std::path::Path,
    journal: &Journal,
    id: SessionId,
) {
    let expected = history_from_journal(journal, id);
    let restored = Session::builder()
        .endpoint(server.base_url())
        .model("scripted")
        .journal_path(path)
        .tool(echo_tool(seed))
        .restore(id)
        .await
        .expect("restore");
    let history = restored.history().await.expect("history");
    assert_eq!(
        history, expected,
        "seed {seed}: session {id} restores exactly"
    );
    if let Some(EventKind::SessionStarted {
        fork: Some(link), ..
    }) = journaled(journal, id).first().map(|e| e.kind.clone())
    {
        let parent: Vec<Message> = journal
            .read_range(link.session, ..=link.through_seq, None)
            .expect("read the parent")
            .into_iter()
            .flat_map(|(_, e)| committed_messages(&e))
            .collect();
        assert_eq!(
            history.get(..parent.len()),
            Some(&parent[..]),
            "seed {seed}: fork {id} begins with its parent's history through the fork point"
        );
    }
    restored.shutdown().await;
}

fn is_history(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::TurnStarted { .. } | EventKind::StepDone { .. } | EventKind::Compacted { .. }
    ) || kind.terminal().is_some()
}
