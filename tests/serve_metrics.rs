//! `GET /metrics` on `treadle serve`: after a run with a task and an agent step, the
//! Prometheus text counts the run, its steps by kind and outcome, the agent's tokens by
//! model, and no run in progress.

use crate::common;

use common::Fixture;
use common::server::Server;
use serde_json::{Value, json};
use treadle::server::metrics::{Counts, render};
use treadle_scripted::{Reply, Script, ScriptedServer};

async fn get_text(s: &Server, path: &str) -> (u16, String, String) {
    let r = s.http().get(s.url(path)).send().await.expect("GET");
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_runs_steps_and_tokens_by_model() {
    let model = ScriptedServer::start(Script::new([Reply::text("Done.").usage(21, 4)]))
        .await
        .unwrap();
    let yaml = format!(
        "agents:\n  - name: a\n    source: {{ model: acme/m1, endpoint: \"{}\" }}\njobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n      - agent: a\n        prompt: Say done.\n",
        model.base_url()
    );
    let f = Fixture::new(&yaml);
    let s = Server::start(f.path(), &[], &[]);
    let started: Value = s
        .http()
        .post(s.url("/api/v1/runs"))
        .json(&json!({"pipeline": "treadle"}))
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    let id = started["id"].as_u64().expect("id");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let run: Value = s
            .http()
            .get(s.url(&format!("/api/v1/runs/{id}")))
            .send()
            .await
            .expect("GET run")
            .json()
            .await
            .expect("json");
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "run {id} never ended");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }

    let (code, kind, text) = get_text(&s, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    for line in [
        "# TYPE treadle_runs_total counter",
        "treadle_runs_total{status=\"succeeded\"} 1",
        "treadle_steps_total{kind=\"task\",status=\"succeeded\"} 1",
        "treadle_steps_total{kind=\"agent\",status=\"succeeded\"} 1",
        "treadle_tokens_total{model=\"acme/m1\",type=\"prompt\"} 21",
        "treadle_tokens_total{model=\"acme/m1\",type=\"completion\"} 4",
        "# TYPE treadle_queue_depth gauge",
        "treadle_queue_depth 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
}

#[test]
fn label_values_are_escaped() {
    let mut counts = Counts::default();
    counts
        .tokens
        .insert(("we\"ird\\model\nx".to_owned(), "prompt"), 3);
    counts.cost_usd.insert("m".to_owned(), 0.25);
    let text = render(&counts, 2);
    assert!(
        text.contains("treadle_tokens_total{model=\"we\\\"ird\\\\model\\nx\",type=\"prompt\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("treadle_cost_usd_total{model=\"m\"} 0.25"),
        "{text}"
    );
    assert!(text.contains("treadle_queue_depth 2"), "{text}");
}
