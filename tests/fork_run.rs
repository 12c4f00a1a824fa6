//! `treadle run --fork RUN --at STEP[/TURN] --prompt TEXT`: a new run whose steps before
//! STEP come back from RUN, whose agent step goes on from a fork of its session in RUN, and
//! which leaves RUN (its records, its transcript, its step's session) as it was.

use crate::common;

use common::Fixture;
use common::server::{Server, get};
use serde_json::{Value, json};
use treadle::run::Store;
use treadle::run::step_sessions;
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::event::{Event, EventKind, SessionId};

/// examples/review.yml with `run_shell` granted, so the first review has an effect.
const REVIEW: &str = "agents:
  - name: reviewer
    system: You review short texts. Be terse.
    tools: [read_file, write_file, run_shell]
jobs:
  - name: review
    plan:
      - task: draft
        outputs: [draft]
        run: printf 'Release notes\\n\\n- faster startup\\n' > draft/notes.md
      - agent: reviewer
        inputs: [draft]
        outputs: [report]
        prompt: Review draft/notes.md.
        verdicts:
          - approve: publish
          - reject: escalate
        assert:
          files: [report/summary.md]
      - task: escalate
        run: echo \"the reviewer rejected the draft\"; exit 1
      - task: publish
        inputs: [report]
        run: cat report/summary.md
";

/// The first review reads, notes it with a shell command, writes "Fine notes." and
/// approves; asked "Look again." it writes "Second look." and approves.
fn script() -> Script {
    Script::from_fn(|body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let again = messages[last_user]["content"] == "Look again.";
        let done = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        let summary = if again { "Second look." } else { "Fine notes." };
        match (again, done) {
            (false, 0) => Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
            (false, 1) => Reply::tool_call("run_shell", json!({"command": "echo reviewed"})),
            (false, 2) | (true, 0) => Reply::tool_call(
                "write_file",
                json!({"path": "report/summary.md", "content": summary}),
            ),
            (false, 3) | (true, 1) => {
                Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "ok"}))
            }
            _ => Reply::text(summary),
        }
    })
}

/// The reviewer's session in `run`, and its journaled events.
fn reviewer_session(f: &Fixture, run: u64) -> (SessionId, Vec<(u64, Event)>) {
    let store = Store::open(&f.path().join(".treadle/state.redb")).expect("state");
    let row = step_sessions::of(&store.database(), run, "1")
        .expect("read")
        .expect("the reviewer's session");
    let events = store.journal().read(row.session, 0, None).expect("read");
    (row.session, events)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_of_a_finished_review_has_its_own_transcript_and_leaves_the_parent_untouched() {
    let server = ScriptedServer::start(script()).await.expect("server");
    let url = server.base_url().to_owned();
    let f = Fixture::new(REVIEW);
    let (f, first) = f.run_at(&url).await;
    first.expect_code(0);
    assert!(first.stdout().contains("Fine notes."), "{}", first.stdout());
    let (parent_session, parent_events) = reviewer_session(&f, 1);
    let parent_show = f.treadle(&["runs", "--show", "1", "--json"]).stdout();
    let parent_steps = f.treadle(&["runs", "--steps", "1"]).stdout();

    let args = [
        "run",
        "--fork",
        "1",
        "--at",
        "reviewer/1",
        "--prompt",
        "Look again.",
    ];
    let (f, fork) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&args, &[("TREADLE_LOCAL_URL", url.as_str())]);
        (f, run)
    })
    .await
    .expect("join");
    let out = fork.stdout();
    fork.expect_code(0);
    assert!(out.contains("Second look."), "{out}");
    assert!(
        out.contains(&format!(
            "forks run 1's session {parent_session} after turn 1"
        )),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("which the fork does not undo")
                && l.contains(r#"run_shell {"command":"echo reviewed"}"#)),
        "the shell call's effect is named: {out}"
    );
    assert!(
        out.contains("draft [task] cached: not run, cached from run 1"),
        "{out}"
    );

    // The fork's step ran on a session of its own, forked from the parent's.
    let (fork_session, fork_events) = reviewer_session(&f, 2);
    assert_ne!(fork_session, parent_session);
    let EventKind::SessionStarted {
        fork: Some(link), ..
    } = &fork_events[0].1.kind
    else {
        panic!("the fork's session starts linked: {:?}", fork_events[0]);
    };
    assert_eq!(link.session, parent_session);
    // The model saw the first review, then the new message.
    let last = server.requests().last().expect("a request").body.clone();
    let sent = last["messages"].to_string();
    assert!(sent.contains("Review draft/notes.md.") && sent.contains("Look again."));

    // The parent is as it was: its session event for event, its transcript and records.
    assert_eq!(reviewer_session(&f, 1), (parent_session, parent_events));
    assert_eq!(
        f.treadle(&["runs", "--show", "1", "--json"]).stdout(),
        parent_show
    );
    assert_eq!(f.treadle(&["runs", "--steps", "1"]).stdout(), parent_steps);
    // `treadle runs` and the API say where the fork comes from.
    let runs = f.treadle(&["runs"]).stdout();
    let row = runs.lines().find(|l| l.trim_start().starts_with("2 "));
    assert!(
        row.is_some_and(|l| l.ends_with("fork of run 1 at reviewer/1")),
        "{runs}"
    );
    assert!(
        !runs
            .lines()
            .any(|l| l.trim_start().starts_with("1 ") && l.contains("fork")),
        "{runs}"
    );
    // A point that names no turn, or no step, is refused, and makes no fork.
    let url = server.base_url().to_owned();
    let (f, refused) = tokio::task::spawn_blocking(move || {
        let env = [("TREADLE_LOCAL_URL", url.as_str())];
        let no_turn = f.treadle_env(&["run", "--fork", "1", "--at", "reviewer/5"], &env);
        let no_step = f.treadle_env(&["run", "--fork", "1", "--at", "nope"], &env);
        (f, [no_turn, no_step])
    })
    .await
    .expect("join");
    let [no_turn, no_step] = refused;
    assert_ne!(no_turn.code(), 0);
    assert!(
        no_turn
            .stdout()
            .contains("has 1 turn(s); there is no turn 5"),
        "{}",
        no_turn.stdout()
    );
    no_step.expect_code(2);
    assert!(
        no_step.stderr().contains("no step `nope`"),
        "{}",
        no_step.stderr()
    );
    assert_eq!(reviewer_session(&f, 1).0, parent_session);
    // The API says it too (a server started on the state file).
    let served = Server::start(f.path(), &["treadle.yml"], &[]);
    let (code, fork_view) = get(&served, "/api/v1/runs/2").await;
    assert_eq!(code, 200, "{fork_view}");
    assert_eq!(
        fork_view["forked_from"],
        json!({"run": 1, "at": "reviewer/1", "step": "reviewer"})
    );
    let (_, parent_view) = get(&served, "/api/v1/runs/1").await;
    assert!(parent_view.get("forked_from").is_none(), "{parent_view}");
    let (_, list) = get(&served, "/api/v1/runs").await;
    assert!(
        list.as_array().is_some_and(|l| l
            .iter()
            .any(|r| r["id"] == 2 && r["forked_from"]["run"] == 1)),
        "{list}"
    );
    drop(served);
    // The fork's transcript is its own.
    let fork_show = f.treadle(&["runs", "--show", "2"]).stdout();
    assert!(fork_show.contains("Second look."), "{fork_show}");
    assert!(!parent_show.contains("Second look."));
}

#[test]
fn a_fork_of_no_run_without_a_point_or_with_an_unreadable_prompt_is_refused() {
    let f = Fixture::new(REVIEW);
    let none = f.treadle(&["run", "--fork", "1", "--at", "reviewer/1"]);
    none.expect_code(2);
    assert!(none.stderr().contains("no run 1"), "{}", none.stderr());
    let no_at = f.treadle(&["run", "--fork", "1"]);
    assert_ne!(no_at.code(), 0);
    assert!(no_at.stderr().contains("--at"), "{}", no_at.stderr());
    let missing = f.path().join("no-such-prompt.txt");
    let unread = f.treadle(&[
        "run",
        "--fork",
        "1",
        "--at",
        "reviewer",
        "--prompt-file",
        missing.to_str().expect("utf-8"),
    ]);
    unread.expect_code(2);
    assert!(
        unread.stderr().contains("cannot read"),
        "{}",
        unread.stderr()
    );
}
