//! The watcher inside `treadle serve`: the served file's trigger resources are polled and
//! its jobs built as runs of the server (trigger `watch`), `passed:` included, and
//! `POST /hooks/check/{resource}` on the server's listener checks at once, with the
//! resource's token and without the server's own.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::Fixture;
use common::server::Server;
use common::watch::{commit, init_repo, lines, pipeline, post};

fn wait(what: &str, ok: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_builds_what_its_files_trigger_and_takes_webhooks() {
    let counts = tempfile::tempdir().unwrap();
    let yaml = pipeline(counts.path()).replace(
        "    source: { uri: ./repo, branch: main }\n",
        "    source: { uri: ./repo, branch: main }\n    webhook_token_env: REPO_HOOK_TOKEN\n",
    );
    let f = Fixture::new(&yaml);
    let repo = f.path().join("repo");
    init_repo(&repo, "v1");
    let env = [
        ("REPO_HOOK_TOKEN", "hook-tok"),
        ("SERVER_TOKEN", "server-tok"),
    ];
    let args = [
        "treadle.yml",
        "--interval",
        "1h",
        "--token-env",
        "SERVER_TOKEN",
    ];
    let server = Server::start(f.path(), &args, &env);
    let deployed = counts.path().join("deployed");
    wait("v1 deployed by the server", || lines(&deployed) == ["v1"]);
    let runs = Command::new("curl")
        .args(["-s", "-H", "Authorization: Bearer server-tok"])
        .arg(server.url("/api/v1/runs"))
        .output()
        .unwrap();
    let runs = String::from_utf8_lossy(&runs.stdout);
    assert_eq!(runs.matches("\"trigger\":\"watch\"").count(), 2, "{runs}");
    commit(&repo, "v2");
    let hook = server.url("/hooks/check/repo");
    assert_eq!(
        post(&hook, Some("server-tok")),
        401,
        "the server's token is not the hook's"
    );
    assert_eq!(post(&hook, Some("hook-tok")), 202);
    wait("v2 deployed after the webhook", || {
        lines(&deployed) == ["v1", "v2"]
    });
    assert_eq!(lines(&counts.path().join("built")), ["v1", "v2"]);
}
