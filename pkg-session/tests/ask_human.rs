//! `ask_human`: the model asks a person through a durable gate; an answer that does not fit
//! the question's schema is refused and the gate stays open; a valid one continues the turn
//! and is what the model reads. Deadlines give the default answer, or fail the call.

use crate::common;

use std::time::Duration;

use serde_json::{Value, json};
use treadle_event::{EventFilter, EventKind, GateAnswer};
use treadle_scripted::Reply;
use treadle_session::{AskHuman, GateError, GateKind, GateQuestion, Session};

/// The model asks, then says what it read.
async fn asking(arguments: Value) -> treadle_scripted::ScriptedServer {
    common::server([
        Reply::tool_call("ask_human", arguments),
        Reply::text("thanks"),
    ])
    .await
}

/// The result of the `ask_human` call in the model's last request.
fn read_by_model(server: &treadle_scripted::ScriptedServer) -> (String, bool) {
    let requests = server.requests();
    let last = requests.last().expect("a request");
    let tool = last.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool result")
        .clone();
    let content = tool["content"].as_str().unwrap_or_default().to_owned();
    (
        content.clone(),
        content.starts_with("no answer") || content.starts_with("the person"),
    )
}

/// Waits for the next `GateOpened` and reads it as a request.
async fn next_question(sub: &mut treadle_session::Subscription) -> GateQuestion {
    loop {
        let delivery = tokio::time::timeout(Duration::from_secs(20), sub.next())
            .await
            .expect("a gate in time")
            .expect("open stream")
            .expect("not lost");
        if let Some(request) = GateQuestion::from_event(&delivery.event) {
            return request;
        }
    }
}

/// A session with `ask_human` whose model asks with `arguments`, its turn running, and the
/// question it opened.
struct Asked {
    server: treadle_scripted::ScriptedServer,
    session: Session,
    turn: tokio::task::JoinHandle<Result<treadle_session::TurnReport, treadle_session::RunError>>,
    request: GateQuestion,
    _dir: tempfile::TempDir,
}

async fn asked(arguments: Value) -> Asked {
    let server = asking(arguments).await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(AskHuman::new())
        .start()
        .await
        .expect("start");
    let mut sub = session.subscribe(EventFilter::enduring_only());
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.turn("go on").run().await })
    };
    let request = next_question(&mut sub).await;
    Asked {
        server,
        session,
        turn,
        request,
        _dir: dir,
    }
}

#[tokio::test]
async fn an_invalid_answer_is_refused_and_a_valid_one_continues_the_turn() {
    let a = asked(json!({
        "question": "How many replicas?",
        "schema": { "type": "integer", "minimum": 1, "maximum": 9 }
    }))
    .await;
    assert_eq!(a.request.kind, GateKind::HumanInput);
    let question = a.request.human.clone().expect("the question");
    assert_eq!(question.question, "How many replicas?");

    for bad in [json!("lots"), json!(0), json!(12)] {
        let refused = a
            .session
            .respond_gate(a.request.gate, GateAnswer::Answer { value: bad.clone() })
            .await;
        match refused {
            Err(GateError::Refused { gate, reason }) => {
                assert_eq!(gate, a.request.gate);
                assert!(reason.contains("does not fit"), "{bad}: {reason}");
            }
            other => panic!("{bad} was not refused: {other:?}"),
        }
    }
    let approve = a
        .session
        .respond_gate(a.request.gate, GateAnswer::Approve)
        .await;
    assert!(
        matches!(approve, Err(GateError::Refused { .. })),
        "{approve:?}"
    );

    a.session
        .respond_gate(a.request.gate, GateAnswer::Answer { value: json!(3) })
        .await
        .expect("a valid answer is taken");
    let report = a.turn.await.expect("join").expect("run");
    assert_eq!(report.answer().expect("done"), "thanks");
    assert_eq!(read_by_model(&a.server), ("3".to_owned(), false));

    // Only the accepted answer is journaled.
    let resolved: Vec<GateAnswer> = a
        .session
        .journal()
        .read(a.session.id(), 0, None)
        .expect("read")
        .into_iter()
        .filter_map(|(_, e)| match e.kind {
            EventKind::GateResolved { answer, .. } => Some(answer),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, vec![GateAnswer::Answer { value: json!(3) }]);
    a.session.shutdown().await;
}

#[tokio::test]
async fn choices_limit_the_answers() {
    let a = asked(json!({ "question": "Ship?", "choices": ["yes", "no"] })).await;
    let refused = a
        .session
        .respond_gate(
            a.request.gate,
            GateAnswer::Answer {
                value: json!("maybe"),
            },
        )
        .await;
    assert!(
        matches!(refused, Err(GateError::Refused { .. })),
        "{refused:?}"
    );
    a.session
        .respond_gate(a.request.gate, GateAnswer::Answer { value: json!("no") })
        .await
        .expect("a choice");
    assert!(a.turn.await.expect("join").expect("run").is_done());
    assert_eq!(read_by_model(&a.server), ("no".to_owned(), false));
}

async fn unanswered(tool: AskHuman) -> (String, bool) {
    let server = asking(json!({ "question": "Anyone there?" })).await;
    let dir = tempfile::tempdir().expect("dir");
    let session: Session = common::session(server.base_url(), &dir)
        .tool(tool)
        .start()
        .await
        .expect("start");
    // Somebody watches (so the gate opens), but nobody answers.
    let _sub = session.subscribe(EventFilter::enduring_only());
    let report = session.turn("ask").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    read_by_model(&server)
}

#[tokio::test]
async fn at_the_deadline_the_default_answer_is_taken() {
    let tool = AskHuman::new()
        .deadline(Duration::from_millis(200))
        .default_answer(json!("nobody objected"));
    assert_eq!(
        unanswered(tool).await,
        ("nobody objected".to_owned(), false)
    );
}

#[tokio::test]
async fn at_the_deadline_without_a_default_the_call_fails() {
    let tool = AskHuman::new().deadline(Duration::from_millis(200));
    assert_eq!(
        unanswered(tool).await,
        ("no answer before the deadline".to_owned(), true)
    );
}

#[tokio::test]
async fn an_on_gate_handler_answers_questions() {
    let server = asking(json!({ "question": "Name?" })).await;
    let dir = tempfile::tempdir().expect("dir");
    let session = common::session(server.base_url(), &dir)
        .tool(AskHuman::new())
        .headless(true)
        .on_gate(|request| async move {
            match request.human {
                Some(_) => GateAnswer::Answer {
                    value: json!("Ada"),
                },
                None => GateAnswer::deny("no permissions here"),
            }
        })
        .start()
        .await
        .expect("start");
    assert!(session.turn("who?").run().await.expect("run").is_done());
    assert_eq!(read_by_model(&server), ("Ada".to_owned(), false));
}
