//! The secret headers of `http:` steps, against real loopback servers: a redirect to
//! another origin (another port) is followed without them, and `follow_redirects: false`
//! does not follow it; a secret the server echoes with JSON `\u` escapes is masked; a
//! secret too short to be masked is a load error at the step, naming the variable only.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;

use crate::common::{Fixture, Run};

const KEY: &str = "key-7c1e9a5b3d";

/// Each request a server saw: its path and its `x-api-key` header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A loopback server answering `app`; its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A server that notes every request into `seen` and answers 200 `landed`.
async fn recorder(seen: Seen) -> String {
    let app = Router::new().fallback(move |uri: axum::http::Uri, h: HeaderMap| async move {
        let key = h
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.lock()
            .expect("seen")
            .push((uri.path().to_owned(), key));
        "landed"
    });
    serve(app).await
}

/// A server whose `/away` redirects (307) to `to`, and whose `/home` redirects to its
/// own `/landing`, noting each request into `seen`.
async fn redirector(seen: Seen, to: String) -> String {
    let app = Router::new().fallback(move |uri: axum::http::Uri, h: HeaderMap| async move {
        let key = h
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let path = uri.path().to_owned();
        seen.lock().expect("seen").push((path.clone(), key));
        match path.as_str() {
            "/away" => (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, to.clone())],
            )
                .into_response(),
            "/home" => (
                StatusCode::FOUND,
                [(header::LOCATION, "/landing".to_owned())],
            )
                .into_response(),
            _ => "landed".into_response(),
        }
    });
    serve(app).await
}

async fn run(yaml: String, env: Vec<(&'static str, String)>) -> Run {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Fixture::new(&yaml).treadle_env(&["run"], &env)
    })
    .await
    .expect("the run's thread")
}

fn step(url: &str, extra: &str) -> String {
    format!(
        "jobs:\n  - name: j\n    plan:\n      - http: call\n        url: {url}\n        secret_headers: {{ X-Api-Key: API_KEY }}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_to_another_port_carries_no_secret_header() {
    let (elsewhere, here): (Seen, Seen) = Default::default();
    let other = recorder(elsewhere.clone()).await;
    let base = redirector(here.clone(), format!("{other}/land")).await;
    let done = run(
        step(&format!("{base}/away"), ""),
        vec![("API_KEY", KEY.to_owned())],
    )
    .await;
    done.expect_code(0);
    let got = elsewhere.lock().expect("seen").clone();
    assert_eq!(
        got,
        vec![("/land".to_owned(), None)],
        "the other origin got the key"
    );
    // The same origin still gets it, before and after a redirect within it.
    let done = run(
        step(&format!("{base}/home"), ""),
        vec![("API_KEY", KEY.to_owned())],
    )
    .await;
    done.expect_code(0);
    let got = here.lock().expect("seen").clone();
    let key = Some(KEY.to_owned());
    assert_eq!(
        got,
        vec![
            ("/away".to_owned(), key.clone()),
            ("/home".to_owned(), key.clone()),
            ("/landing".to_owned(), key)
        ]
    );
    // Not followed when asked: the 307 is the answer, which `expect:` judges.
    let done = run(
        step(
            &format!("{base}/away"),
            "        follow_redirects: false\n        expect: [307]\n",
        ),
        vec![("API_KEY", KEY.to_owned())],
    )
    .await;
    done.expect_code(0);
    assert_eq!(
        elsewhere.lock().expect("seen").len(),
        1,
        "the redirect was followed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_echoed_with_json_escapes_is_masked() {
    let app = Router::new().fallback(|h: HeaderMap| async move {
        let key = h
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let escaped: String = key
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        format!("{{\"you_sent\": \"{escaped}\"}}")
    });
    let base = serve(app).await;
    let done = run(
        step(
            &format!("{base}/echo"),
            "      - task: after\n        run: echo after\n",
        ),
        vec![("API_KEY", KEY.to_owned())],
    )
    .await;
    done.expect_code(0);
    let out = done.stdout();
    assert!(out.contains("\"you_sent\": \"***\""), "{out}");
    assert!(
        !out.contains("\\u006b\\u0065\\u0079"),
        "the escaped key was shown:\n{out}"
    );
}

#[test]
fn a_secret_too_short_to_mask_is_a_load_error() {
    let f = Fixture::new(&step("http://127.0.0.1:1/", ""));
    let done = f.treadle_env(&["validate"], &[("API_KEY", "ab3d5")]);
    let err = format!("{}{}", done.stdout(), done.stderr());
    assert_ne!(done.code(), 0, "{err}");
    assert!(err.contains("treadle.yml:4:15: "), "{err}");
    assert!(err.contains("`API_KEY`"), "{err}");
    assert!(err.contains("too short to be masked"), "{err}");
    assert!(err.contains("at least 6 characters"), "{err}");
    assert!(!err.contains("ab3d5"), "the secret is in the error: {err}");
}
