//! `SessionBuilder::fork`: a new session whose history is the parent's up to a committed
//! point; the parent is never changed, the fork restores like any session, and a gate the
//! parent was asked is asked again in the fork, never answered from the parent's answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tempfile::TempDir;
use treadle_event::{Block, Event, EventFilter, EventKind, ForkPoint, GateAnswer, GateId, Message};
use treadle_hook::Policy;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{
    FnTool, ForkError, GateError, JournalView, Session, SessionBuilder, SubAgent, Subscription,
    TurnOutcome,
};

/// "steps N": N echo steps, then text. "write": one `write` call, then text. Anything else:
/// a text answer naming the input and how many messages the model saw.
fn script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let input = messages[last_user]["content"].as_str().unwrap_or_default();
        let results = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        if let Some(n) = input.strip_prefix("steps ") {
            let n: usize = n.parse().unwrap_or(0);
            return if results < n {
                Reply::text(format!("step {results}"))
                    .with_tool_calls([ToolCall::new("echo", json!({ "i": results }))])
            } else {
                Reply::text(format!("{n} steps done"))
            };
        }
        if input.starts_with("write") && results == 0 {
            return Reply::text("").with_tool_calls([ToolCall::new("write", json!({}))]);
        }
        Reply::text(format!(
            "answer to {input} after {} messages",
            messages.len()
        ))
    })
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    i: Value,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

struct World {
    server: ScriptedServer,
    dir: TempDir,
    writes: Arc<AtomicUsize>,
}

impl World {
    async fn new() -> World {
        World {
            server: ScriptedServer::start(script()).await.expect("server"),
            dir: tempfile::tempdir().expect("dir"),
            writes: Arc::default(),
        }
    }

    /// A builder with `echo`, and `write`, which a policy makes ask through a gate.
    fn builder(&self) -> SessionBuilder {
        let writes = self.writes.clone();
        Session::builder()
            .endpoint(self.server.base_url())
            .model("scripted")
            .journal_path(self.dir.path().join("j.redb"))
            .tool(FnTool::plain("echo", "Echoes i.", |a: EchoArgs| a.i))
            .tool(FnTool::plain("write", "Writes.", move |_: NoArgs| {
                writes.fetch_add(1, Ordering::SeqCst);
                "written"
            }))
            .hook(Policy::new().ask("write"))
    }
}

fn events(view: &JournalView, session: treadle_event::SessionId) -> Vec<(u64, Event)> {
    view.read(session, 0, None).expect("read")
}

/// The next `GateOpened` on `events`.
async fn next_gate(events: &mut Subscription) -> GateId {
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(delivery) = events.next().await {
            if let EventKind::GateOpened { gate, .. } = delivery.expect("delivery").event.kind {
                return gate;
            }
        }
        panic!("the subscription ended before a gate opened")
    })
    .await
    .expect("a gate opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_before_a_turn_asks_it_anew_and_leaves_the_parent_as_it_was() {
    let world = World::new().await;
    let parent = world.builder().start().await.expect("start");
    parent.turn("first").run().await.expect("run");
    parent.turn("steps 2").run().await.expect("run");
    let before = events(parent.journal(), parent.id());
    let turns = parent
        .journal()
        .committed_turns(parent.id())
        .expect("turns");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1].steps.len(), 3, "two tool steps and the answer");
    assert!(turns.iter().all(|t| t.ended));

    let fork = world
        .builder()
        .fork(parent.id(), ForkPoint::BeforeTurn(turns[1].turn))
        .await
        .expect("fork");
    assert_ne!(fork.id(), parent.id());
    let first_turn = parent.history().await.expect("history")[..2].to_vec();
    assert_eq!(fork.history().await.expect("history"), first_turn);
    let report = fork
        .turn("second, asked another way")
        .run()
        .await
        .expect("run");
    assert_eq!(
        report.answer().ok(),
        Some("answer to second, asked another way after 3 messages"),
        "the model saw the first turn, then the new input"
    );

    // The fork's first event names its parent and point.
    let forked = events(fork.journal(), fork.id());
    let EventKind::SessionStarted {
        fork: Some(link), ..
    } = &forked[0].1.kind
    else {
        panic!(
            "the fork starts with a linked SessionStarted: {:?}",
            forked[0]
        );
    };
    assert_eq!(link.session, parent.id());
    assert_eq!(link.at, ForkPoint::BeforeTurn(turns[1].turn));
    assert_eq!(link.copied, 3, "turn 1's start, step and end");
    assert!(forked.iter().all(|(_, e)| e.header.session == fork.id()));
    // Nothing of the parent's changed, and it goes on as before.
    assert_eq!(events(parent.journal(), parent.id()), before);
    parent.turn("third").run().await.expect("run");
    let parent_text: Vec<String> = parent
        .history()
        .await
        .expect("history")
        .iter()
        .map(Message::text_content)
        .collect();
    assert!(!parent_text.iter().any(|t| t.contains("another way")));
    fork.shutdown().await;
    parent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_after_a_step_goes_on_from_it_and_restores_exactly() {
    let world = World::new().await;
    let parent = world.builder().start().await.expect("start");
    parent.turn("steps 3").run().await.expect("run");
    let turns = parent
        .journal()
        .committed_turns(parent.id())
        .expect("turns");
    let fork = world
        .builder()
        .fork(parent.id(), ForkPoint::AfterStep(turns[0].steps[0]))
        .await
        .expect("fork");
    let expected: Vec<Message> = parent.history().await.expect("history")[..3].to_vec();
    assert_eq!(fork.history().await.expect("history"), expected);
    // The cut turn is closed in the fork, once; the parent's stays done.
    let forked = events(fork.journal(), fork.id());
    let terminals: Vec<&EventKind> = forked
        .iter()
        .map(|(_, e)| &e.kind)
        .filter(|k| k.terminal().is_some())
        .collect();
    assert!(
        matches!(terminals[..], [EventKind::TurnInterrupted { steps: 1, .. }]),
        "{terminals:?}"
    );
    let report = fork.turn("go on").run().await.expect("run");
    assert_eq!(
        report.answer().ok(),
        Some("answer to go on after 4 messages")
    );
    let id = fork.id();
    let live = fork.history().await.expect("history");
    fork.shutdown().await;
    drop(fork);

    let restored = world.builder().restore(id).await.expect("restore the fork");
    assert_eq!(restored.history().await.expect("history"), live);
    // A fork of the fork, at the fork's own (copied) step ids.
    let fork_turns = restored.journal().committed_turns(id).expect("turns");
    assert_eq!(fork_turns[0].steps, turns[0].steps[..1]);
    let grandchild = world
        .builder()
        .fork(id, ForkPoint::AfterTurn(fork_turns[1].turn))
        .await
        .expect("fork the fork");
    assert_eq!(grandchild.history().await.expect("history"), live);
    grandchild.shutdown().await;
    restored.shutdown().await;
    parent.shutdown().await;
}

/// LangGraph's stale resume: a fork taken where the parent was asked something must ask
/// again, and an answer given to the parent, before or after the fork, must not reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_open_at_the_fork_point_is_asked_again_and_never_answered_from_the_parent() {
    let world = World::new().await;
    let parent = world.builder().start().await.expect("start");
    let mut parent_events = parent.subscribe(EventFilter::enduring_only());
    parent.turn("hello").run().await.expect("run");
    let turn_one = parent.journal().committed_turns(parent.id()).expect("t")[0].turn;
    // The parent's turn 2 parks on the write gate.
    parent.turn("write once").submit().await.expect("submit");
    let parent_gate = next_gate(&mut parent_events).await;

    let fork = world
        .builder()
        .fork(parent.id(), ForkPoint::AfterTurn(turn_one))
        .await
        .expect("fork while the parent's gate is open");
    let mut fork_events = fork.subscribe(EventFilter::enduring_only());
    let forked = events(fork.journal(), fork.id());
    assert!(
        !forked.iter().any(|(_, e)| matches!(
            e.kind,
            EventKind::GateOpened { .. } | EventKind::GateResolved { .. }
        )),
        "no gate of the parent comes across"
    );
    let fork_turn = tokio::spawn({
        let fork = fork.clone();
        async move { fork.turn("write again").run().await }
    });
    let fork_gate = next_gate(&mut fork_events).await;
    assert_ne!(
        fork_gate, parent_gate,
        "the fork asks through a gate of its own"
    );
    // The parent's gate is not the fork's to answer, and the parent's answer is not its.
    assert!(matches!(
        fork.respond_gate(parent_gate, GateAnswer::Approve).await,
        Err(GateError::NotOpen(_))
    ));
    parent
        .respond_gate(parent_gate, GateAnswer::ApproveAlways)
        .await
        .expect("answer the parent");
    let parent_report = parent.last_turn().await.expect("report").expect("turn");
    assert!(parent_report.is_done(), "{parent_report:?}");
    assert_eq!(world.writes.load(Ordering::SeqCst), 1, "the parent wrote");
    assert!(
        !fork_turn.is_finished(),
        "the fork still waits on its own gate"
    );
    fork.respond_gate(fork_gate, GateAnswer::deny("not in the fork"))
        .await
        .expect("answer the fork");
    let report = fork_turn.await.expect("join").expect("run");
    assert!(report.is_done(), "{report:?}");
    assert_eq!(
        world.writes.load(Ordering::SeqCst),
        1,
        "the fork never wrote"
    );

    // A fork taken after the parent's ApproveAlways still asks: approvals do not cross.
    let turn_two = parent.journal().committed_turns(parent.id()).expect("t")[1].turn;
    let later = world
        .builder()
        .fork(parent.id(), ForkPoint::AfterTurn(turn_two))
        .await
        .expect("fork after the answer");
    let mut later_events = later.subscribe(EventFilter::enduring_only());
    let later_turn = tokio::spawn({
        let later = later.clone();
        async move { later.turn("write later").run().await }
    });
    let later_gate = next_gate(&mut later_events).await;
    later
        .respond_gate(later_gate, GateAnswer::Approve)
        .await
        .expect("answer");
    assert!(later_turn.await.expect("join").expect("run").is_done());
    assert_eq!(world.writes.load(Ordering::SeqCst), 2);
    for session in [later, fork, parent] {
        session.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_that_is_not_committed_is_refused_and_writes_nothing() {
    let world = World::new().await;
    let parent = world.builder().start().await.expect("start");
    let mut parent_events = parent.subscribe(EventFilter::enduring_only());
    parent.turn("write").submit().await.expect("submit");
    let _gate = next_gate(&mut parent_events).await;
    let turn = parent.journal().committed_turns(parent.id()).expect("t")[0].turn;
    let sessions_before = parent.journal().sessions().expect("sessions");
    let parent_before = events(parent.journal(), parent.id());

    let refused = world
        .builder()
        .fork(parent.id(), ForkPoint::AfterTurn(turn))
        .await;
    assert!(
        matches!(refused, Err(ForkError::TurnNotEnded { turn: t, .. }) if t == turn),
        "{:?}",
        refused.err()
    );
    let unknown = world
        .builder()
        .fork(
            parent.id(),
            ForkPoint::AfterStep(treadle_event::StepId::new()),
        )
        .await;
    assert!(matches!(unknown, Err(ForkError::NoSuchPoint { .. })));
    let nobody = world
        .builder()
        .fork(treadle_event::SessionId::new(), ForkPoint::BeforeTurn(turn))
        .await;
    assert!(matches!(nobody, Err(ForkError::NotFound { .. })));
    assert_eq!(
        parent.journal().sessions().expect("sessions"),
        sessions_before
    );
    assert_eq!(events(parent.journal(), parent.id()), parent_before);
    parent.interrupt().await.expect("interrupt");
    let report = parent.last_turn().await.expect("report").expect("turn");
    assert!(matches!(report.outcome, TurnOutcome::Interrupted { .. }));
    parent.shutdown().await;
}

const CHILD_PROMPT: &str = "You are the helper.";

/// The main agent delegates every input to `helper`; the helper answers with how many
/// messages it saw, so its own history shows in its answer.
fn delegating_script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if messages[0]["content"] == CHILD_PROMPT {
            return Reply::text(format!("helper saw {}", messages.len()));
        }
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        if messages[last_user..].iter().any(|m| m["role"] == "tool") {
            Reply::text("relayed")
        } else {
            Reply::tool_call("helper", json!({ "task": "count" }))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_keeps_its_history_in_the_fork_and_a_fork_into_another_file_stands_alone() {
    let server = ScriptedServer::start(delegating_script())
        .await
        .expect("server");
    let (home, away) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let builder = |dir: &TempDir| {
        Session::builder()
            .endpoint(server.base_url())
            .model("scripted")
            .journal_path(dir.path().join("j.redb"))
            .sub_agent(SubAgent::new("helper", "Counts.").system_prompt(CHILD_PROMPT))
    };
    let parent = builder(&home).start().await.expect("start");
    parent.turn("one").run().await.expect("run");
    let turn = parent.journal().committed_turns(parent.id()).expect("t")[0].turn;
    let before = events(parent.journal(), parent.id());

    let fork = builder(&away)
        .fork_from(parent.journal(), parent.id(), ForkPoint::AfterTurn(turn))
        .await
        .expect("fork into another file");
    assert_ne!(fork.journal().path(), parent.journal().path());
    let report = fork.turn("two").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    // The helper's second task came after its first, carried over: system, task, answer,
    // task.
    let history = fork.history().await.expect("history");
    assert!(
        history
            .iter()
            .flat_map(|m| &m.content)
            .any(|b| matches!(b, Block::ToolResult { content, .. } if content == "helper saw 4")),
        "{history:?}"
    );
    let forked = events(fork.journal(), fork.id());
    let parent_loops: std::collections::HashSet<_> = before
        .iter()
        .filter_map(|(_, e)| e.header.loop_id)
        .collect();
    assert!(
        forked
            .iter()
            .all(|(_, e)| e.header.loop_id.is_none_or(|l| !parent_loops.contains(&l))),
        "the fork's loops are its own"
    );
    assert_eq!(events(parent.journal(), parent.id()), before);

    // The fork's file alone restores it, with the parent's file gone.
    let (id, live) = (fork.id(), history);
    fork.shutdown().await;
    drop(fork);
    parent.shutdown().await;
    drop(parent);
    drop(home);
    let restored = builder(&away).restore(id).await.expect("restore");
    assert_eq!(restored.history().await.expect("history"), live);
    restored.shutdown().await;
}

/// Figures, printed: forking a session of 200 turns (one tool step each, about 800 history
/// events) at its last turn, and restoring the fork, each averaged over 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints figures"]
async fn figures_fork_of_a_200_turn_session() {
    const TURNS: usize = 200;
    let world = World::new().await;
    let parent = world.builder().start().await.expect("start");
    for _ in 0..TURNS {
        parent.turn("steps 1").run().await.expect("run");
    }
    let turns = parent
        .journal()
        .committed_turns(parent.id())
        .expect("turns");
    let last = turns.last().expect("a turn").turn;
    let (mut fork_time, mut restore_time) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..10 {
        let started = std::time::Instant::now();
        let fork = world
            .builder()
            .fork(parent.id(), ForkPoint::AfterTurn(last))
            .await
            .expect("fork");
        fork_time += started.elapsed();
        let id = fork.id();
        fork.shutdown().await;
        drop(fork);
        let started = std::time::Instant::now();
        let restored = world.builder().restore(id).await.expect("restore");
        restore_time += started.elapsed();
        restored.shutdown().await;
    }
    let events = events(parent.journal(), parent.id()).len();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{{\"turns\": {TURNS}, \"parent_events\": {events}, \"fork_ms\": {:.2}, \"restore_fork_ms\": {:.2}, \"loadavg\": \"{}\"}}",
        fork_time.as_secs_f64() * 100.0,
        restore_time.as_secs_f64() * 100.0,
        load.trim()
    );
    parent.shutdown().await;
}
