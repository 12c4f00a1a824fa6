//! Vars given over the API are data (docs/security.md): a served pipeline whose task says
//! `run: echo ((who))`, started through a real `treadle serve` with shell payloads in
//! `who`, runs nothing but `echo`, and the value arrives intact; a var that stands where
//! a command would take it as code (a program's path, a `when:` command) or that the file
//! does not use is refused with where it stands.

use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const ECHO: &str = "jobs:\n  - name: main\n    plan:\n      - task: greet\n        run: echo ((who))\n      - task: argv\n        run: { path: printf, args: ['%s|', '((who))'] }\n      - task: env\n        env: { GREETING: ((who)) }\n        run: printf '%s' \"$GREETING\"\n";

async fn ended(s: &Server, id: u64) -> Value {
    let started = Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            return run;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never ended");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shell_payloads_in_an_api_var_run_nothing_and_arrive_intact() {
    let f = Fixture::new(ECHO);
    let s = Server::start(f.path(), &[], &[]);
    let payloads = [
        "x; echo INJECTED",
        "$(echo INJECTED)",
        "`echo INJECTED`",
        "a\necho INJECTED",
        "'\"; echo INJECTED; \"'",
        "*",
        "two  spaces && echo INJECTED",
    ];
    for who in payloads {
        let (code, started) = post(
            &s,
            "/api/v1/runs",
            json!({"pipeline": "treadle", "vars": {"who": who}}),
        )
        .await;
        assert_eq!(code, 201, "{who:?}: {started}");
        let run = ended(&s, started["id"].as_u64().expect("id")).await;
        assert_eq!(run["status"], "succeeded", "{who:?}: {run}");
        let steps = run["steps"].as_array().expect("steps");
        let tail = |i: usize| {
            steps[i]["output_tail"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(tail(0), format!("{who}\n"), "run: echo, {who:?}");
        // (The tail of an output without a final newline gets one.)
        assert_eq!(
            tail(1),
            format!("{who}|\n"),
            "run: {{ path, args }}, {who:?}"
        );
        assert_eq!(tail(2), format!("{who}\n"), "env:, {who:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_var_where_it_would_be_code_or_unused_is_refused() {
    let program = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: t\n        run: { path: ((who)), args: [x] }\n",
    );
    let s = Server::start(program.path(), &[], &[]);
    let (code, body) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"who": "id"}}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("path:"), "{body}");
    let (code, body) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"who": "x", "whom": "x"}}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("((whom))"),
        "{body}"
    );
    drop(s);

    let guard = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: t\n        when: test ((who)) = yes\n        run: echo ran\n",
    );
    let s = Server::start(guard.path(), &[], &[]);
    let (code, body) = post(
        &s,
        "/api/v1/runs",
        json!({"pipeline": "treadle", "vars": {"who": "yes"}}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("line 5, column 20"), "{message}");
    assert!(message.contains("--var who="), "{message}");
    // Nothing ran in either server.
    let (_, runs) = get(&s, "/api/v1/runs").await;
    assert_eq!(runs, json!([]));
}
