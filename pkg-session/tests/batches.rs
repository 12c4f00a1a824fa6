//! Tool batches end to end: bad arguments, a panicking tool, a gate deadline, parallel and
//! ordered execution (what calls touch), call order, and the per-turn call limit.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_event::{Block, EventKind, GateAnswer, Role};
use treadle_hook::Policy;
use treadle_scripted::{Reply, ScriptedServer, ToolCall};
use treadle_session::{FnTool, Session, SessionBuilder, ToolError, TurnOutcome};

#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    /// Milliseconds to sleep.
    ms: u64,
    /// A label to report back.
    label: String,
    /// Where the call writes, if anywhere. Only the batch reads it (as the write target).
    #[serde(default)]
    #[allow(dead_code)]
    path: Option<String>,
    /// Before sleeping, wait until this many calls run at once, or until `of` calls have
    /// started: a rendezvous, so that overlap is proved without relying on timing.
    #[serde(default)]
    together: Option<usize>,
    /// How many calls of the batch there are (see `together`).
    #[serde(default)]
    of: Option<usize>,
}

/// How long a call waits for its rendezvous before it goes on alone (and the test's
/// overlap assertion then fails).
const RENDEZVOUS: Duration = Duration::from_secs(5);

/// Watches how many calls run at once and in what order they start and end.
#[derive(Default, Clone)]
struct Probe {
    running: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Probe {
    fn enter(&self, label: &str) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.started.fetch_add(1, Ordering::SeqCst);
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.push(format!("start {label}"));
    }

    /// Waits until `together` calls run at once or `of` calls have started (each unset one
    /// never holds), for at most [`RENDEZVOUS`].
    async fn rendezvous(&self, together: Option<usize>, of: Option<usize>) {
        let Some(together) = together else {
            return;
        };
        let began = Instant::now();
        while self.running.load(Ordering::SeqCst) < together
            && of.is_none_or(|of| self.started.load(Ordering::SeqCst) < of)
            && began.elapsed() < RENDEZVOUS
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn leave(&self, label: &str) {
        self.push(format!("end {label}"));
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    fn push(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// A tool `name` that sleeps `ms` and reports `label`, watched by this probe, declaring
    /// that it touches nothing (so its calls run in parallel with any).
    fn tool(
        &self,
        name: &str,
    ) -> FnTool<
        SleepArgs,
        impl Fn(SleepArgs) -> futures::future::BoxFuture<'static, Result<String, ToolError>>
        + Send
        + Sync
        + 'static,
    > {
        self.undeclared(name).touches_nothing()
    }

    /// The same tool declaring nothing about what it touches: it may touch anything.
    fn undeclared(
        &self,
        name: &str,
    ) -> FnTool<
        SleepArgs,
        impl Fn(SleepArgs) -> futures::future::BoxFuture<'static, Result<String, ToolError>>
        + Send
        + Sync
        + 'static,
    > {
        let probe = self.clone();
        FnTool::new(
            name,
            "Sleeps, then reports its label.",
            move |a: SleepArgs| {
                let probe = probe.clone();
                Box::pin(async move {
                    probe.enter(&a.label);
                    probe.rendezvous(a.together, a.of).await;
                    tokio::time::sleep(Duration::from_millis(a.ms)).await;
                    probe.leave(&a.label);
                    Ok::<_, ToolError>(a.label)
                }) as futures::future::BoxFuture<'static, _>
            },
        )
    }
}

fn sleep_call(tool: &str, ms: u64, label: &str) -> ToolCall {
    ToolCall::new(tool, json!({ "ms": ms, "label": label }))
}

fn builder(server: &ScriptedServer, dir: &tempfile::TempDir) -> SessionBuilder {
    common::session(server.base_url(), dir)
}

/// The tool results (content, is_error) of the first tool message in the history.
async fn first_results(session: &Session) -> Vec<(String, bool)> {
    let history = session.history().await.expect("history");
    history
        .iter()
        .find(|m| m.role == Role::Tool)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolResult {
                        content, is_error, ..
                    } => Some((content.clone(), *is_error)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn arguments_that_are_not_json_or_do_not_fit_the_schema_are_refused_readably() {
    let probe = Probe::default();
    let server = common::server(vec![
        Reply::tool_calls([
            // Beyond repair (a bare word is no JSON value; see repair.rs for what is mended).
            ToolCall::raw("sleep", "{\"ms\": 1, \"label\": fine}"),
            ToolCall::new("sleep", json!({ "ms": "soon", "label": "x" })),
            ToolCall::new("sleep", json!({ "ms": 1 })),
            ToolCall::new("sleep", json!([1, 2])),
            sleep_call("sleep", 1, "fine"),
        ]),
        Reply::text("done"),
        Reply::text("still usable"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(probe.tool("sleep"))
        .start()
        .await
        .expect("start");
    let report = session.turn("go").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    let results = first_results(&session).await;
    assert_eq!(results.len(), 5);
    assert!(
        results[0].0.contains("not valid JSON") && results[0].1,
        "{results:?}"
    );
    assert!(
        results[1].0.contains("do not fit its parameter schema") && results[1].0.contains("/ms"),
        "{results:?}"
    );
    assert!(
        results[2].0.contains("label"),
        "names the missing property: {results:?}"
    );
    assert!(
        results[3].0.contains("must be a JSON object"),
        "{results:?}"
    );
    assert_eq!(results[4], ("fine".to_owned(), false));
    assert_eq!(
        probe.log(),
        vec!["start fine", "end fine"],
        "only the good call ran"
    );
    assert!(session.turn("again").run().await.expect("run").is_done());
    session.shutdown().await;
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result_and_the_session_goes_on() {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let server = common::server(vec![
        Reply::tool_calls([
            ToolCall::new("boom", json!({})),
            ToolCall::new("ok", json!({})),
        ]),
        Reply::text("recovered"),
        Reply::text("next turn"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(FnTool::new("boom", "Panics.", |_: Nothing| async move {
            if true {
                panic!("the tool fell over");
            }
            Ok::<_, ToolError>(String::new())
        }))
        .tool(FnTool::new("ok", "Fine.", |_: Nothing| async move {
            Ok::<String, ToolError>("fine".into())
        }))
        .start()
        .await
        .expect("start");
    let report = session.turn("go").run().await.expect("run");
    assert_eq!(
        report.outcome,
        TurnOutcome::Done {
            text: "recovered".into()
        }
    );
    let results = first_results(&session).await;
    assert_eq!(
        results,
        vec![
            ("tool boom panicked: the tool fell over".to_owned(), true),
            ("fine".to_owned(), false),
        ]
    );
    assert!(session.turn("again").run().await.expect("run").is_done());
    session.shutdown().await;
}

#[tokio::test]
async fn a_gate_deadline_that_passes_denies_and_closes_the_gate() {
    let probe = Probe::default();
    let server = common::server(vec![
        Reply::tool_calls([sleep_call("sleep", 1, "asked")]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(probe.tool("sleep"))
        .hook(Policy::new().ask("sleep"))
        .gate_deadline(Duration::from_millis(30))
        .start()
        .await
        .expect("start");
    // Someone watches (so the gate opens and waits) but never answers.
    let _watcher = session.subscribe(treadle_event::EventFilter::enduring_only());
    let started = Instant::now();
    let report = session.turn("go").run().await.expect("run");
    assert!(report.is_done(), "{report:?}");
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(
        first_results(&session).await,
        vec![("denied: no answer before the deadline".to_owned(), true)]
    );
    assert!(probe.log().is_empty(), "the call never ran");
    let events = session.journal().read(session.id(), 0, None).expect("read");
    let resolved: Vec<_> = events
        .iter()
        .filter_map(|(_, e)| match &e.kind {
            EventKind::GateResolved { answer, .. } => Some(answer.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, vec![GateAnswer::Expired]);
    session.shutdown().await;
}

#[tokio::test]
async fn calls_run_in_parallel_up_to_the_limit_and_results_keep_call_order() {
    for (limit, expected_peak) in [(None, 8), (Some(3), 3)] {
        let probe = Probe::default();
        // Later calls sleep less, so they finish first; the results must still be in order.
        // Each call waits until as many run as the limit allows (or all have started), so
        // the peak is reached however slowly the machine starts them.
        let together = limit.unwrap_or(8);
        let calls: Vec<ToolCall> = (0..8)
            .map(|i| {
                ToolCall::new(
                    "sleep",
                    json!({ "ms": 40 - 4 * i, "label": format!("c{i}"), "together": together, "of": 8 }),
                )
            })
            .collect();
        let server = common::server(vec![Reply::tool_calls(calls), Reply::text("done")]).await;
        let dir = tempfile::tempdir().expect("dir");
        let mut b = builder(&server, &dir).tool(probe.tool("sleep"));
        if let Some(limit) = limit {
            b = b.max_parallel_tools(limit);
        }
        let session = b.start().await.expect("start");
        assert!(session.turn("go").run().await.expect("run").is_done());
        assert_eq!(probe.peak(), expected_peak, "limit {limit:?}");
        let labels: Vec<String> = first_results(&session)
            .await
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        let expected: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        assert_eq!(labels, expected);
        session.shutdown().await;
    }
}

#[tokio::test]
async fn a_tool_touching_everything_runs_alone_and_same_writes_run_in_call_order() {
    let probe = Probe::default();
    let server = common::server(vec![
        Reply::tool_calls([
            // p1 and p2 each wait for the other; w1 waits for w3, the one call that may run
            // beside it.
            ToolCall::new("sleep", json!({ "ms": 20, "label": "p1", "together": 2 })),
            ToolCall::new("sleep", json!({ "ms": 20, "label": "p2", "together": 2 })),
            sleep_call("seq", 5, "s"),
            ToolCall::new(
                "write",
                json!({ "ms": 20, "label": "w1", "path": "a.md", "together": 2 }),
            ),
            ToolCall::new("write", json!({ "ms": 1, "label": "w2", "path": "a.md" })),
            ToolCall::new("write", json!({ "ms": 1, "label": "w3", "path": "b.md" })),
        ]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(probe.tool("sleep"))
        .tool(probe.undeclared("seq"))
        .tool(probe.undeclared("write").writes_arg("path"))
        .start()
        .await
        .expect("start");
    assert!(session.turn("go").run().await.expect("run").is_done());
    let log = probe.log();
    let at = |line: &str| {
        log.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line} missing from {log:?}"))
    };
    // p1 and p2 overlap; the sequential call starts after both end and ends before any
    // write starts.
    assert!(at("start p2") < at("end p1"), "{log:?}");
    assert!(at("start s") > at("end p1").max(at("end p2")), "{log:?}");
    assert!(at("end s") < at("start w1"), "{log:?}");
    // w1 and w2 share a.md: w2 starts only after w1 ends, although w1 is slower. w3 (b.md)
    // runs alongside w1.
    assert!(at("start w2") > at("end w1"), "{log:?}");
    assert!(at("start w3") < at("end w1"), "{log:?}");
    let labels: Vec<String> = first_results(&session)
        .await
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(labels, ["p1", "p2", "s", "w1", "w2", "w3"]);
    session.shutdown().await;
}

#[tokio::test]
async fn the_per_turn_call_limit_ends_the_turn_with_a_clear_failure() {
    let probe = Probe::default();
    let server = common::server(vec![
        Reply::tool_calls([sleep_call("sleep", 1, "a"), sleep_call("sleep", 1, "b")]),
        Reply::tool_calls([sleep_call("sleep", 1, "c"), sleep_call("sleep", 1, "d")]),
        Reply::text("next"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(probe.tool("sleep"))
        .max_tool_calls_per_turn(3)
        .start()
        .await
        .expect("start");
    let report = session.turn("go").run().await.expect("run");
    let TurnOutcome::Failed { error, .. } = &report.outcome else {
        panic!("{report:?}");
    };
    assert!(error.contains("limit of 3 tool calls"), "{error}");
    assert_eq!(report.steps, 1, "the first step stays committed");
    assert_eq!(
        probe.log().len(),
        4,
        "only the first batch ran: {:?}",
        probe.log()
    );
    // The discarded step left no tool uses without results: the next turn works.
    let history = session.history().await.expect("history");
    assert_eq!(history.len(), 3, "{history:?}");
    let next = session.turn("again").run().await.expect("run");
    assert_eq!(
        next.outcome,
        TurnOutcome::Done {
            text: "next".into()
        }
    );
    session.shutdown().await;
}

#[tokio::test]
async fn a_read_and_a_write_of_one_place_run_in_call_order_and_reads_share() {
    let probe = Probe::default();
    let at = |ms: u64, label: &str, path: &str| json!({ "ms": ms, "label": label, "path": path });
    let server = common::server(vec![
        Reply::tool_calls([
            // r1 waits until three calls have started (r2 and `other` can, w and r3 cannot
            // before r1 ends), so the overlap is proved without relying on timing.
            ToolCall::new(
                "read",
                json!({ "ms": 30, "label": "r1", "path": "a.md", "together": 5, "of": 3 }),
            ),
            ToolCall::new("read", at(1, "r2", "a.md")),
            ToolCall::new("write", at(20, "w", "a.md")),
            ToolCall::new("read", at(1, "r3", "a.md")),
            ToolCall::new("read", at(1, "other", "b.md")),
        ]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let session = builder(&server, &dir)
        .tool(probe.undeclared("read").reads_arg("path"))
        .tool(probe.undeclared("write").writes_arg("path"))
        .start()
        .await
        .expect("start");
    assert!(session.turn("go").run().await.expect("run").is_done());
    let log = probe.log();
    let at = |line: &str| {
        log.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line} missing from {log:?}"))
    };
    // Two reads of a.md overlap; the write waits for both, though it came after them, and
    // the read after the write waits for it. b.md is not waited for.
    assert!(at("start r2") < at("end r1"), "{log:?}");
    assert!(at("start w") > at("end r1").max(at("end r2")), "{log:?}");
    assert!(at("start r3") > at("end w"), "{log:?}");
    assert!(at("start other") < at("end r1"), "{log:?}");
    let labels: Vec<String> = first_results(&session)
        .await
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(labels, ["r1", "r2", "w", "r3", "other"]);
    session.shutdown().await;
}
