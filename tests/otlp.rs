//! Spans over OTLP: a pipeline with an agent step runs with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at a real OTLP/HTTP receiver on loopback (axum, decoding the protobuf bodies
//! with the OpenTelemetry project's own types). The spans arrive with their names, their
//! parents and the GenAI attributes, and the API key is in none of the bytes received.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use common::Fixture;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};

const KEY: &str = "sk-otlp-test-Vb39kQ2xR8";

/// What the receiver got: the raw bodies, in order.
type Received = Arc<Mutex<Vec<Bytes>>>;

/// Starts the receiver; returns its base URL and what it receives.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(|State(r): State<Received>, body: Bytes| async move {
                r.lock().unwrap().push(body);
                // An empty ExportTraceServiceResponse: everything accepted.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

fn text(value: Option<&AnyValue>) -> Option<String> {
    match value?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| text(kv.value.as_ref()))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_run_exports_its_spans_with_genai_attributes_and_no_key() {
    let (endpoint, received) = receiver().await;
    let model = ScriptedServer::start(Script::new([
        Reply::tool_calls([ToolCall::new(
            "read_file",
            json!({ "path": "inbox/note.txt" }),
        )])
        .usage(11, 3),
        Reply::text("The note says hello.").usage(17, 5),
    ]))
    .await
    .unwrap();
    let yaml = format!(
        "agents:\n  - name: a\n    source: {{ model: acme/m1, endpoint: \"{}\", api_key_env: ACME_OTLP_KEY }}\n    tools: [read_file]\njobs:\n  - name: j\n    plan:\n      - task: write\n        run: echo hello > inbox/note.txt\n        outputs: [inbox]\n      - agent: a\n        inputs: [inbox]\n        prompt: What does the note say?\n",
        model.base_url()
    );
    let f = Fixture::new(&yaml);
    let (_f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(
            &["run"],
            &[
                ("ACME_OTLP_KEY", KEY),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ],
        );
        (f, run)
    })
    .await
    .unwrap();
    run.expect_code(0);

    let bodies = received.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "no OTLP request arrived");
    for body in &bodies {
        assert!(
            !body.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key was exported"
        );
    }
    let spans: Vec<Span> = bodies
        .iter()
        .map(|b| ExportTraceServiceRequest::decode(b.as_ref()).expect("a protobuf request"))
        .flat_map(|r| r.resource_spans)
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect();
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent = |s: &Span| -> String {
        by_id
            .get(s.parent_span_id.as_slice())
            .map_or_else(|| "(root)".to_owned(), |p| p.name.clone())
    };
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();

    let run_span = named("run");
    assert_eq!(run_span.len(), 1, "{names:?}");
    assert_eq!(parent(run_span[0]), "(root)");
    assert_eq!(parent(named("job")[0]), "run");
    assert_eq!(parent(named("step write")[0]), "job", "{names:?}");
    assert_eq!(parent(named("step a")[0]), "job");
    let agent = named("invoke_agent");
    assert_eq!(agent.len(), 1, "{names:?}");
    assert_eq!(parent(agent[0]), "step a");
    assert_eq!(
        attr(agent[0], "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(parent(named("turn")[0]), "invoke_agent");

    let chats = named("chat acme/m1");
    assert_eq!(chats.len(), 2, "{names:?}");
    let mut tokens: Vec<(String, String)> = Vec::new();
    for chat in &chats {
        assert_eq!(parent(chat), "turn");
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(
            attr(chat, "gen_ai.request.model").as_deref(),
            Some("acme/m1")
        );
        tokens.push((
            attr(chat, "gen_ai.usage.input_tokens").unwrap_or_default(),
            attr(chat, "gen_ai.usage.output_tokens").unwrap_or_default(),
        ));
    }
    tokens.sort();
    assert_eq!(
        tokens,
        [("11".into(), "3".into()), ("17".into(), "5".into())],
        "input and output tokens of each model call"
    );
    let tool = named("execute_tool read_file");
    assert_eq!(tool.len(), 1, "{names:?}");
    assert_eq!(parent(tool[0]), "turn");
    assert_eq!(
        attr(tool[0], "gen_ai.tool.name").as_deref(),
        Some("read_file")
    );

    // One trace: every span shares the run's trace id.
    assert!(spans.iter().all(|s| s.trace_id == run_span[0].trace_id));
}

#[test]
fn otel_sdk_disabled_turns_export_off() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let env = [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
    ];
    let run = f.treadle_env(&["run"], &env);
    run.expect_code(0);
    assert!(!run.stderr().contains("OTLP"), "{}", run.stderr());
}

#[test]
fn a_collector_that_is_down_costs_only_the_spans() {
    let f = Fixture::new("jobs:\n  - name: j\n    plan:\n      - task: hi\n        run: echo hi\n");
    let started = std::time::Instant::now();
    // Port 9 (discard) has no listener on loopback: the connection is refused.
    let run = f.treadle_env(
        &["run"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")],
    );
    run.expect_code(0);
    assert!(run.stdout().contains("hi"), "{}", run.stdout());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the run waited {:?} for a collector that is down",
        started.elapsed()
    );
}
