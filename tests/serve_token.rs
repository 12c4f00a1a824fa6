//! A `treadle serve` with no token configured makes one: the API refuses a request
//! without it (an agent's `curl` to the approval API included), the address it prints
//! logs a browser in through a same-site HttpOnly cookie, the local commands find it in the
//! state directory (mode 0600, removed at shutdown), and it is in no environment.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

const GATED: &str = "jobs:\n  - name: ship\n    plan:\n      - approval: deploy\n        message: Ship it?\n      - task: deploy-now\n        run: echo deploying\n";

async fn until_pending(s: &Server) -> Value {
    let started = Instant::now();
    loop {
        let (_, list) = get(s, "/api/v1/approvals?state=pending").await;
        if let Some(first) = list.as_array().and_then(|l| l.first()) {
            return first.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never pending");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn until_ended(s: &Server, id: u64) -> Value {
    let started = Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            return run;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never ended");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_configured_token_an_approval_without_the_made_one_is_refused() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &[], &[]);
    let token = s.token.clone().expect("the server made no token");
    let file = f.path().join(".treadle/server.token");
    let mode = std::fs::metadata(&file)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the token file is readable by others");
    let environ = std::fs::read(format!("/proc/{}/environ", s.child.id())).expect("environ");
    assert!(
        !String::from_utf8_lossy(&environ).contains(&token),
        "the token is in the server's environment"
    );
    let (code, started) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let gate = until_pending(&s).await;
    let approve = s.url(&format!("/api/v1/runs/{id}/approvals/{}", gate["seq"]));
    // What the agent did: curl from the same machine, no token.
    let body = json!({"decision": "approve", "by": "alice"});
    let anonymous = common::http()
        .post(&approve)
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(anonymous.status().as_u16(), 401);
    let wrong = common::http()
        .post(&approve)
        .bearer_auth("0".repeat(64))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(wrong.status().as_u16(), 401);
    assert_eq!(
        until_pending(&s).await["seq"],
        gate["seq"],
        "the gate moved"
    );
    // The local command finds the token by itself.
    let dir = f.path().to_path_buf();
    let approved = tokio::task::spawn_blocking(move || {
        common::Run(
            std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
                .args(["approve", &id.to_string(), "deploy"])
                .current_dir(dir)
                .env_remove("TREADLE_SERVER_TOKEN")
                .output()
                .expect("approve"),
        )
    })
    .await
    .expect("thread");
    approved.expect_code(0);
    assert_eq!(until_ended(&s, id).await["status"], "succeeded");
    let out = s.stop();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("/?token={token}")), "{said}");
    assert!(!file.exists(), "the token file outlived the server");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_printed_address_sets_a_same_site_cookie_and_redirects_to_the_clean_one() {
    let f = Fixture::new(GATED);
    let s = Server::start(f.path(), &[], &[]);
    treadle_session::tls::install_crypto_provider();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = no_redirects.get(s.page("/")).send().await.expect("GET");
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/");
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let pair = cookie.split(';').next().expect("name=value").to_owned();
    let runs = no_redirects
        .get(s.url("/api/v1/runs"))
        .header("Cookie", &pair)
        .send()
        .await
        .expect("GET");
    assert_eq!(runs.status().as_u16(), 200);
    let forged = no_redirects
        .get(s.url("/?token=forged"))
        .send()
        .await
        .expect("GET");
    assert_eq!(forged.status().as_u16(), 401);
    assert!(forged.headers().get("set-cookie").is_none());
    // The cookie of another port's server is not this one's.
    let other = pair.replacen("treadle_token_", "treadle_token_1", 1);
    let refused = no_redirects
        .get(s.url("/api/v1/runs"))
        .header("Cookie", other)
        .send()
        .await
        .expect("GET");
    assert_eq!(refused.status().as_u16(), 401);
}
