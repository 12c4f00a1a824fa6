//! The JSON encoding of every event kind round-trips and keeps its documented shape.

use treadle_event::*;

fn every_kind() -> Vec<EventKind> {
    let input = InputId::new();
    let gate = GateId::new();
    let usage = Usage {
        prompt_tokens: 12,
        completion_tokens: 3,
        cached_tokens: 4,
    };
    let assistant = Message {
        role: Role::Assistant,
        content: vec![
            Block::Reasoning { text: "hm".into() },
            Block::Text {
                text: "calling".into(),
            },
            Block::ToolUse {
                id: "call_1".into(),
                name: "echo".into(),
                arguments: r#"{"i":1}"#.into(),
            },
        ],
    };
    let results = Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: "call_1".into(),
            content: "1".into(),
            is_error: true,
        }],
    };
    vec![
        EventKind::TokenDelta {
            kind: DeltaKind::ToolArguments,
            index: Some(0),
            text: "{\"i".into(),
        },
        EventKind::ToolCallStarted {
            call_id: "c".into(),
            name: "echo".into(),
            arguments: "{}".into(),
        },
        EventKind::ToolCallCompleted {
            call_id: "c".into(),
            name: "echo".into(),
            content: "ok".into(),
            is_error: false,
        },
        EventKind::InputQueued { input, position: 1 },
        EventKind::SessionStarted {
            model: "m".into(),
            endpoint: "http://x/v1".into(),
            system: Some("be brief".into()),
            parent: None,
            fork: None,
        },
        EventKind::TurnStarted {
            input,
            message: Message::user("hi"),
        },
        EventKind::StepDone {
            index: 0,
            messages: vec![assistant, results].into(),
            usage,
            model: "m".into(),
        },
        EventKind::GateOpened {
            gate,
            question: "run rm?".into(),
            subject: serde_json::json!({"calls": ["rm"]}),
        },
        EventKind::GateResolved {
            gate,
            answer: GateAnswer::Deny {
                reason: "no".into(),
            },
        },
        EventKind::InputCancelled {
            input,
            reason: "queue full".into(),
        },
        EventKind::SessionStopped {
            reason: "shutdown".into(),
        },
        EventKind::TurnDone {
            text: "done".into(),
            steps: 2,
            usage,
        },
        EventKind::TurnFailed {
            error: "500".into(),
            steps: 1,
            usage,
            failure: FailureCause::Model,
            model: Some(ModelFailure::ServerError),
        },
        EventKind::TurnInterrupted {
            reason: "interrupt".into(),
            steps: 0,
            usage,
        },
    ]
}

#[test]
fn every_kind_round_trips_with_its_type_tag() {
    let session = SessionId::new();
    for kind in every_kind() {
        let header = Header::in_loop(session, LoopId::new())
            .with_turn(TurnId::new())
            .with_step(StepId::new())
            .with_cause(Cause::Input(InputId::new()));
        let event = Event::new(header, kind);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], event.kind.name(), "{json}");
        assert_eq!(json["session"], session.to_string());
        assert!(json.get("loop").is_some());
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }
}

#[test]
fn session_headers_omit_absent_coordinates_and_unknown_fields_are_ignored() {
    let event = Event::new(
        Header::session(SessionId::new()),
        EventKind::SessionStopped {
            reason: "bye".into(),
        },
    );
    let mut json = serde_json::to_value(&event).unwrap();
    for absent in ["loop", "turn", "step", "cause"] {
        assert!(json.get(absent).is_none(), "{absent} should be omitted");
    }
    json["added_in_a_later_version"] = serde_json::json!(true);
    assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
}

#[test]
fn classes_and_scopes() {
    for kind in every_kind() {
        let class = kind.class();
        match kind.name() {
            "token_delta" | "tool_call_started" | "tool_call_completed" | "input_queued" => {
                assert_eq!(class, Class::Ephemeral)
            }
            "turn_done" | "turn_failed" | "turn_interrupted" => {
                assert_eq!(class, Class::Terminal);
                assert!(kind.terminal().is_some());
            }
            _ => assert_eq!(class, Class::Enduring),
        }
        let session_scoped = matches!(kind.name(), "session_started" | "session_stopped");
        assert_eq!(kind.scope() == Scope::Session, session_scoped);
    }
}

#[test]
fn filter_picks_loops_per_class() {
    let session = SessionId::new();
    let (main, child) = (LoopId::new(), LoopId::new());
    let delta = |l| {
        Event::new(
            Header::in_loop(session, l),
            EventKind::TokenDelta {
                kind: DeltaKind::Text,
                index: None,
                text: "x".into(),
            },
        )
    };
    let done = |l| {
        Event::new(
            Header::in_loop(session, l),
            EventKind::TurnDone {
                text: String::new(),
                steps: 0,
                usage: Usage::default(),
            },
        )
    };
    let stopped = Event::new(
        Header::session(session),
        EventKind::SessionStopped {
            reason: String::new(),
        },
    );

    let filter = EventFilter {
        ephemeral: LoopScope::Only(vec![main]),
        enduring: LoopScope::All,
    };
    assert!(filter.admits(&delta(main)));
    assert!(!filter.admits(&delta(child)));
    assert!(filter.admits(&done(child)));

    let quiet = EventFilter {
        ephemeral: LoopScope::None,
        enduring: LoopScope::None,
    };
    assert!(!quiet.admits(&delta(main)));
    assert!(!quiet.admits(&done(main)));
    assert!(quiet.admits(&stopped), "session-scoped events always pass");
}

#[test]
fn a_fork_link_rides_in_session_started_and_older_events_decode_without_it() {
    let (parent, turn) = (SessionId::new(), TurnId::new());
    let link = ForkLink {
        session: parent,
        at: ForkPoint::AfterTurn(turn),
        through_seq: 7,
        copied: 3,
    };
    let started = EventKind::SessionStarted {
        model: "m".into(),
        endpoint: "http://x/v1".into(),
        system: None,
        parent: None,
        fork: Some(link.clone()),
    };
    let event = Event::new(Header::in_loop(SessionId::new(), LoopId::new()), started);
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["fork"]["session"], parent.to_string());
    assert_eq!(json["fork"]["at"]["kind"], "after_turn");
    assert_eq!(json["fork"]["at"]["id"], turn.to_string());
    assert_eq!(
        serde_json::from_value::<Event>(json.clone()).unwrap(),
        event
    );

    // A journal written before forks existed has no `fork` field.
    let mut old = json;
    old.as_object_mut().unwrap().remove("fork");
    let decoded: Event = serde_json::from_value(old).unwrap();
    assert!(matches!(
        decoded.kind,
        EventKind::SessionStarted { fork: None, .. }
    ));
}

/// A step's messages are shared (`Arc<[Message]>`) since issue 42, and encode byte for byte
/// as the `Vec<Message>` they were: journals written before read back, and after encode the
/// same. The text below is a `StepDone` as a build with a `Vec` wrote it.
#[test]
fn step_done_messages_encode_as_the_array_they_always_were() {
    let written = r#"{"id":"01938a4b-7c00-7000-8000-000000000001","session":"01938a4b-7c00-7000-8000-000000000002","loop":"01938a4b-7c00-7000-8000-000000000003","turn":"01938a4b-7c00-7000-8000-000000000004","step":"01938a4b-7c00-7000-8000-000000000005","at_ms":1733500000000,"type":"step_done","index":0,"messages":[{"role":"assistant","content":[{"type":"text","text":"calling"},{"type":"tool_use","id":"call_1","name":"echo","arguments":"{\"i\":1}"}]},{"role":"tool","content":[{"type":"tool_result","call_id":"call_1","content":"1"}]}],"usage":{"prompt_tokens":12,"completion_tokens":3,"cached_tokens":0},"model":"m"}"#;
    let event: Event = serde_json::from_str(written).unwrap();
    let EventKind::StepDone { messages, .. } = &event.kind else {
        panic!("not a StepDone: {event:?}");
    };
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].role, Role::Tool);
    assert_eq!(serde_json::to_string(&event).unwrap(), written);
}
