//! A step's failure is typed to the outside: each `step_finished`/`run_finished` line of
//! `--json`, the state file's records and `GET /api/v1/runs/{id}` carry the failure's kind
//! (`exit_status`, `timeout`, `interrupted`, `asserts_failed`, `refused`, ...) beside its
//! message, and a step the run's interruption stopped is recorded `aborted`.

use crate::common;

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const JOBS: &str = r#"
jobs:
  - name: exit
    plan:
      - task: boom
        run: echo oops; exit 3
  - name: timeout
    plan:
      - task: nap
        timeout: 1s
        run: sleep 30
  - name: interrupted
    plan:
      - in_parallel:
          fail_fast: true
          steps:
            - task: quick
              run: exit 1
            - task: slow
              run: sleep 30
  - name: assert
    plan:
      - task: greet
        run: echo hi
        assert:
          stdout: bye
  - name: configuration
    plan:
      - task: boxed
        image: alpine
        run: 'true'
"#;

/// The JSON lines of a run of `job`, which must exit with `code`.
fn json_run(f: &Fixture, job: &str, code: i32) -> Vec<Value> {
    let run = f.treadle(&["run", "--json", "--job", job]);
    run.expect_code(code);
    run.stdout()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The `step_finished` line of step `name`.
fn finished<'e>(events: &'e [Value], name: &str) -> &'e Value {
    events
        .iter()
        .find(|e| e["event"] == "step_finished" && e["name"] == name)
        .unwrap_or_else(|| panic!("no step_finished for {name}: {events:?}"))
}

/// The `run_finished` line.
fn run_end(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["event"] == "run_finished")
        .expect("a run_finished line")
}

/// Step `name` in a run's tree of steps, however deep.
fn node<'v>(steps: &'v Value, name: &str) -> Option<&'v Value> {
    steps.as_array()?.iter().find_map(|s| {
        if s["name"] == name {
            Some(s)
        } else {
            node(&s["children"], name)
        }
    })
}

#[tokio::test]
async fn each_failure_has_its_kind_in_json_lines_and_the_api() {
    let f = Fixture::new(JOBS);
    // (job, exit code, step, its status, its kind, the run's kind)
    let cases = [
        ("exit", 1, "boom", "failed", "exit_status", "exit_status"),
        ("timeout", 1, "nap", "failed", "timeout", "timeout"),
        // The group that stopped `slow` failed because `quick` exited 1: the run says so.
        (
            "interrupted",
            1,
            "slow",
            "failed",
            "interrupted",
            "exit_status",
        ),
        (
            "assert",
            1,
            "greet",
            "failed",
            "asserts_failed",
            "asserts_failed",
        ),
        (
            "configuration",
            2,
            "boxed",
            "errored",
            "configuration",
            "configuration",
        ),
    ];
    for (job, code, step, status, kind, run_kind) in cases {
        let events = json_run(&f, job, code);
        let line = finished(&events, step);
        assert_eq!(line["status"], status, "{job}: {line}");
        assert_eq!(line["failure"], kind, "{job}: {line}");
        assert!(
            line["error"].is_string(),
            "{job}: the message stays: {line}"
        );
        assert_eq!(run_end(&events)["failure"], run_kind, "{job}: {events:?}");
    }
    // A succeeding step carries no kind.
    let ok = Fixture::new("plan:\n  - task: fine\n    run: 'true'\n");
    let events = json_run(&ok, "main", 0);
    assert!(finished(&events, "fine").get("failure").is_none());
    assert!(run_end(&events).get("failure").is_none());

    // The API shows the records the runs above left (runs 1 to 5, in `cases` order).
    let s = Server::start(f.path(), &[], &[]);
    for (id, (job, _, step, status, kind, run_kind)) in (1..).zip(cases) {
        let (code, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
        assert_eq!(code, 200, "{run}");
        assert_eq!(run["job"], job, "{run}");
        assert_eq!(run["failure"], run_kind, "{job}: {run}");
        let shown = node(&run["steps"], step).expect("the step in the tree");
        assert_eq!(shown["status"], status, "{job}: {shown}");
        assert_eq!(shown["failure"], kind, "{job}: {shown}");
    }
}

#[tokio::test]
async fn a_cancelled_run_records_its_step_aborted_as_interrupted() {
    let f = Fixture::new("plan:\n  - task: nap\n    run: sleep 30\n");
    let s = Server::start(f.path(), &[], &[]);
    let (_, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    let id = started["id"].as_u64().expect("id");
    // Cancelled once the step runs, so that it is the step the interruption stops.
    let started = std::time::Instant::now();
    loop {
        let (_, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
        if node(&run["steps"], "nap").is_some_and(|n| n["status"] == "running") {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "the step never ran: {run}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let (code, _) = post(&s, &format!("/api/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(code, 202);
    let run = crate::serve_api::wait_ended(&s, id).await;
    assert_eq!(run["status"], "aborted", "{run}");
    assert_eq!(run["failure"], "interrupted", "{run}");
    let nap = node(&run["steps"], "nap").expect("nap");
    assert_eq!(nap["status"], "aborted", "{nap}");
    assert_eq!(nap["failure"], "interrupted", "{nap}");
}

/// A confined task refused a path outside its directory: `refused`, not a mere exit code.
#[test]
fn a_step_its_confinement_refused_is_refused() {
    if treadle::confine::abi().is_none() {
        let why = treadle::confine::unavailable().map_or("no Landlock".into(), |w| w.to_string());
        eprintln!("SKIP: {why}");
        return;
    }
    let f = Fixture::new("plan:\n  - task: snoop\n    run: cat PROJECT/treadle.yml\n");
    let yaml = format!(
        "plan:\n  - task: snoop\n    run: cat {}/treadle.yml\n",
        f.path().display()
    );
    std::fs::write(f.file(), yaml).expect("write the pipeline");
    let events = json_run(&f, "main", 1);
    let line = finished(&events, "snoop");
    assert_eq!(line["status"], "failed", "{line}");
    assert_eq!(line["failure"], "refused", "{line}");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("confined")),
        "{line}"
    );
}

/// A step a worker ran over NATS fails with the kind the worker found: the wire carries it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_on_a_worker_keeps_its_kind() {
    let Some(nats) = common::nats::Nats::start("a_failure_on_a_worker_keeps_its_kind") else {
        return;
    };
    let f = Fixture::new("plan:\n  - task: boom\n    run: exit 3\n");
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let _worker = common::nats::Worker::start(&nats.url, 1, &f.path().join("w"), &[]);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let id = body["id"].as_u64().expect("id");
    let limit = std::time::Duration::from_secs(120);
    let run = common::nats::wait_status(&server, id, limit).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["failure"], "exit_status", "{run}");
    let boom = node(&run["steps"], "boom").expect("boom");
    assert_eq!(boom["failure"], "exit_status", "{boom}");
    assert_eq!(boom["exit_code"], 3, "{boom}");
    drop(nats);
}
