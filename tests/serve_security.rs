//! `treadle serve` off loopback: a token is required to start, every API request without
//! it is refused (401) and changes nothing, and a cross-site request that would change
//! state is refused (403) even with the token.

use crate::common;

use common::Fixture;
use common::server::Server;
use serde_json::{Value, json};

const PIPELINE: &str =
    "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n";
const TOKEN: &str = "s3cret-token-for-the-test";

/// The machine's address as seen from here (any non-loopback bind works the same).
const ANYWHERE: &str = "0.0.0.0:0";

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[test]
fn a_non_loopback_bind_without_a_token_does_not_start() {
    let f = Fixture::new(PIPELINE);
    let out = f.treadle(&["serve", "--addr", "0.0.0.0:0"]);
    out.expect_code(2);
    assert!(out.stderr().contains("--token-env"), "{}", out.stderr());
    let unset = f.treadle(&[
        "serve",
        "--addr",
        "0.0.0.0:0",
        "--token-env",
        "NO_SUCH_VAR_HERE",
    ]);
    unset.expect_code(2);
    assert!(
        unset.stderr().contains("NO_SUCH_VAR_HERE"),
        "{}",
        unset.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_without_the_token_are_refused_and_change_nothing() {
    let f = Fixture::new(PIPELINE);
    let s = Server::start_at(
        f.path(),
        &["--token-env", "TEST_TOKEN"],
        ANYWHERE,
        &[("TEST_TOKEN", TOKEN)],
    );
    let discovery = std::fs::read_to_string(f.path().join(".treadle/server.json")).unwrap();
    assert!(
        discovery.contains("\"token_required\": true"),
        "{discovery}"
    );
    assert!(
        !discovery.contains(TOKEN),
        "the token leaked into the discovery file"
    );
    let c = common::http();
    let (code, body) = send(c.get(s.url("/api/v1/runs"))).await;
    assert_eq!(code, 401);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"),
        "{body}"
    );
    let (code, _) = send(c.get(s.url("/api/v1/runs")).bearer_auth("wrong")).await;
    assert_eq!(code, 401);
    let (code, _) = send(
        c.post(s.url("/api/v1/runs"))
            .json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 401);
    let (code, _) = send(c.get(s.url("/api/v1/runs/1/events"))).await;
    assert_eq!(code, 401);
    // Nothing was started.
    let (code, list) = send(c.get(s.url("/api/v1/runs")).bearer_auth(TOKEN)).await;
    assert_eq!((code, list), (200, json!([])));
    // Cross-site, with the token: refused, nothing started.
    let (code, body) = send(
        c.post(s.url("/api/v1/runs"))
            .bearer_auth(TOKEN)
            .header("Origin", "http://evil.example")
            .json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = send(
        c.post(s.url("/api/v1/runs"))
            .bearer_auth(TOKEN)
            .header("Sec-Fetch-Site", "cross-site")
            .json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 403);
    let (_, list) = send(c.get(s.url("/api/v1/runs")).bearer_auth(TOKEN)).await;
    assert_eq!(list, json!([]));
    // The token, same-origin: it runs.
    let origin = s.base.clone();
    let (code, started) = send(
        c.post(s.url("/api/v1/runs"))
            .bearer_auth(TOKEN)
            .header("Origin", origin)
            .header("Sec-Fetch-Site", "same-origin")
            .json(&json!({"pipeline": "treadle"})),
    )
    .await;
    assert_eq!(code, 201, "{started}");
    // The CLI without the token is told how to give it.
    let no_token = f.treadle(&["runs"]);
    no_token.expect_code(2);
    assert!(
        no_token.stderr().contains("TREADLE_SERVER_TOKEN"),
        "{}",
        no_token.stderr()
    );
    // The CLI finds the server and sends the token from TREADLE_SERVER_TOKEN.
    let dir = f.path().to_path_buf();
    let runs = tokio::task::spawn_blocking(move || {
        common::Run(
            std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
                .arg("runs")
                .current_dir(dir)
                .env("TREADLE_SERVER_TOKEN", TOKEN)
                .output()
                .expect("runs"),
        )
    })
    .await
    .unwrap();
    runs.expect_code(0);
    assert!(runs.stdout().contains("    1  "), "{}", runs.stdout());
}
