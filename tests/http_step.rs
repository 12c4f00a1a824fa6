//! `http:` steps against a real HTTP server on loopback (axum, in the test): a GET's body
//! reaches a later task through the step's output artifact; a POST carries its secret
//! header to the server while the secret's value lands in no file of the run and in no
//! output; a status outside `expect` fails the step naming it (failure kind `exit_status`); an unchanged step is
//! replayed from the cache without a request; a bad URL is a located load error; the
//! block of docs/http.md runs; and `Flow::http` records the key its YAML form records.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use treadle::workflow::{self, Flow, FlowError, Http, Options, Workflow};

use crate::common::{Fixture, Run};
use crate::workflow_keys::records_and_keys;

/// What the server saw: the number of requests and each request's headers and body.
#[derive(Default)]
pub(crate) struct Seen {
    count: AtomicUsize,
    requests: Mutex<Vec<(HeaderMap, String)>>,
}

/// A server on loopback: `GET /greeting` says hello, `POST /echo` answers with the
/// `authorization` header it got, `GET /boom` is a 500. Its base URL.
pub(crate) async fn server(seen: Arc<Seen>) -> String {
    let note = |seen: &Arc<Seen>, headers: &HeaderMap, body: String| {
        seen.count.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut r) = seen.requests.lock() {
            r.push((headers.clone(), body));
        }
    };
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen);
    let app = Router::new()
        .route(
            "/greeting",
            get(move |h: HeaderMap| async move {
                note(&s1, &h, String::new());
                "hello from the server"
            }),
        )
        .route(
            "/echo",
            post(move |h: HeaderMap, body: String| async move {
                note(&s2, &h, body);
                let auth = h.get("authorization").and_then(|v| v.to_str().ok());
                format!("you sent {}", auth.unwrap_or("nothing"))
            }),
        )
        .route(
            "/boom",
            get(move |h: HeaderMap| async move {
                note(&s3, &h, String::new());
                (StatusCode::INTERNAL_SERVER_ERROR, "it broke")
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// `treadle run` in `f` on a blocking thread (the server answers meanwhile).
async fn run(f: Fixture, env: &[(&str, &str)]) -> (Fixture, Run) {
    run_args(f, &["run"], env).await
}

/// `treadle ARGS` in `f` on a blocking thread.
async fn run_args(f: Fixture, args: &[&str], env: &[(&str, &str)]) -> (Fixture, Run) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = f.treadle_env(&args, &env);
        (f, run)
    })
    .await
    .expect("the run's thread")
}

fn get_pipeline(base: &str) -> String {
    format!(
        "jobs:\n  - name: fetch\n    plan:\n      - http: greet\n        url: {base}/greeting\n        headers: {{ Accept: text/plain }}\n        output: resp\n      - task: show\n        inputs: [resp]\n        run: echo \"got $(cat resp/body) with $(cat resp/status)\"\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_get_body_reaches_a_later_task_and_a_second_run_is_cached() {
    let seen = Arc::new(Seen::default());
    let base = server(seen.clone()).await;
    let (f, first) = run(Fixture::new(&get_pipeline(&base)), &[]).await;
    first.expect_code(0);
    let out = first.stdout();
    assert!(
        out.contains("got hello from the server with 200"),
        "{out}\n{}",
        first.stderr()
    );
    assert_eq!(seen.count.load(Ordering::SeqCst), 1);
    let accept = seen.requests.lock().expect("seen")[0]
        .0
        .get("accept")
        .cloned();
    assert_eq!(
        accept.as_ref().and_then(|v| v.to_str().ok()),
        Some("text/plain")
    );

    let (_f, second) = run(f, &[]).await;
    second.expect_code(0);
    let out = second.stdout();
    assert!(out.contains("↺ greet"), "the http step is replayed:\n{out}");
    assert!(out.contains("got hello from the server with 200"), "{out}");
    assert_eq!(
        seen.count.load(Ordering::SeqCst),
        1,
        "the cached run sent no request"
    );
}

/// Every file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match p.is_dir() {
            true => files(&p, out),
            false => out.push(p),
        }
    }
}

const SECRET: &str = "Bearer tok-9f8e7d6c5b4a3921";

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_header_reaches_the_server_and_nothing_else() {
    let seen = Arc::new(Seen::default());
    let base = server(seen.clone()).await;
    let yaml = format!(
        "jobs:\n  - name: send\n    plan:\n      - http: post\n        url: {base}/echo\n        method: post\n        body: '{{\"n\": 1}}'\n        secret_headers: {{ Authorization: API_TOKEN }}\n        output: resp\n      - task: show\n        inputs: [resp]\n        run: cat resp/body\n"
    );
    let (f, done) = run(Fixture::new(&yaml), &[("API_TOKEN", SECRET)]).await;
    done.expect_code(0);
    {
        let requests = seen.requests.lock().expect("seen");
        assert_eq!(requests.len(), 1);
        let auth = requests[0]
            .0
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        assert_eq!(auth, Some(SECRET), "the header arrived with the secret");
        assert_eq!(requests[0].1, "{\"n\": 1}");
    }
    let (out, err) = (done.stdout(), done.stderr());
    assert!(out.contains("you sent ***"), "the echo is masked:\n{out}");
    assert!(
        !out.contains("tok-9f8e") && !err.contains("tok-9f8e"),
        "{out}\n{err}"
    );
    let mut all = Vec::new();
    files(&f.path().join(".treadle"), &mut all);
    assert!(all.len() > 2, "the run wrote files: {all:?}");
    for file in &all {
        let bytes = std::fs::read(file).expect("read");
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "the secret is in {}", file.display());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_500_fails_the_step_naming_the_status() {
    let seen = Arc::new(Seen::default());
    let base = server(seen.clone()).await;
    let yaml = format!(
        "jobs:\n  - name: fetch\n    plan:\n      - http: boom\n        url: {base}/boom\n      - task: after\n        run: echo after-ran\n"
    );
    let (_f, done) = run_args(Fixture::new(&yaml), &["run", "--json"], &[]).await;
    done.expect_code(1);
    let out = done.stdout();
    assert!(!out.contains("after-ran"), "{out}");
    let boom = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "step_finished" && e["name"] == "boom")
        .unwrap_or_else(|| panic!("no step_finished for boom:\n{out}"));
    assert_eq!(boom["status"], "failed", "{boom}");
    assert_eq!(boom["failure"], "exit_status", "{boom}");
    let error = boom["error"].as_str().unwrap_or_default();
    assert!(error.contains("HTTP status 500"), "{boom}");
    assert_eq!(seen.count.load(Ordering::SeqCst), 1);
}

#[test]
fn a_url_that_is_not_http_is_a_located_load_error() {
    for (url, what) in [
        (
            "ftp://example.com/x",
            "only http and https URLs are fetched",
        ),
        ("not a url", "is not a URL"),
    ] {
        let yaml = format!("jobs:\n  - name: a\n    plan:\n      - http: x\n        url: {url}\n");
        let f = Fixture::new(&yaml);
        let done = f.treadle(&["run"]);
        done.expect_code(2);
        let err = done.stderr();
        assert!(err.contains("treadle.yml:5:14: "), "{err}");
        assert!(err.contains(what), "{err}");
    }
    let yaml = "jobs:\n  - name: a\n    plan:\n      - http: x\n        url: http://127.0.0.1:1/\n        method: \"GE T\"\n";
    let done = Fixture::new(yaml).treadle(&["run"]);
    done.expect_code(2);
    assert!(
        done.stderr().contains("treadle.yml:6:17: "),
        "{}",
        done.stderr()
    );
}

/// The ```yaml http block of docs/http.md, run against this test's server (its URLs
/// name `http://localhost:8080`).
#[tokio::test(flavor = "multi_thread")]
async fn the_block_of_the_docs_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/http.md")).expect("docs/http.md");
    let start = text.find("```yaml http\n").expect("a yaml http block") + 13;
    let len = text[start..].find("```").expect("its end");
    let seen = Arc::new(Seen::default());
    let base = server(seen.clone()).await;
    let yaml = text[start..start + len].replace("http://localhost:8080", &base);
    let (_f, done) = run(Fixture::new(&yaml), &[("API_TOKEN", SECRET)]).await;
    done.expect_code(0);
    assert_eq!(seen.count.load(Ordering::SeqCst), 2, "{}", done.stdout());
}

/// `Flow::http`, the Rust form of `get_pipeline`'s first step.
struct Fetch(String);

impl Workflow for Fetch {
    type Input = ();
    type Output = (u16, String);
    const NAME: &'static str = "fetch";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<(u16, String), FlowError> {
        let http = Http::get(format!("{}/greeting", self.0))
            .header("Accept", "text/plain")
            .output("resp");
        let out = flow.http("greet", http).await?;
        Ok((out.status, out.body))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn flow_http_records_the_key_of_its_yaml_step() {
    let seen = Arc::new(Seen::default());
    let base = server(seen.clone()).await;
    let yaml = format!(
        "jobs:\n  - name: fetch\n    plan:\n      - http: greet\n        url: {base}/greeting\n        headers: {{ Accept: text/plain }}\n        output: resp\n"
    );
    let (yaml, done) = run(Fixture::new(&yaml), &[]).await;
    done.expect_code(0);

    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let report = workflow::run(&Fetch(base), (), Options::new(&state))
        .await
        .expect("run");
    let output = report.output.expect("the workflow's output");
    assert_eq!(output, (200, "hello from the server".to_owned()));

    let from_yaml = records_and_keys(&yaml.path().join(".treadle/state.redb"), 1);
    let from_rust = records_and_keys(&state, report.run);
    assert_eq!(from_yaml.len(), 1, "{from_yaml:#?}");
    assert_eq!(from_rust.len(), 1, "{from_rust:#?}");
    let ((y, ykey), (r, rkey)) = (&from_yaml[0], &from_rust[0]);
    assert!(!ykey.is_empty(), "{y}");
    assert_eq!(ykey, rkey, "keys differ:\nyaml {y}\nrust {r}");
    assert_eq!(y, r, "records differ");
    assert_eq!(
        seen.count.load(Ordering::SeqCst),
        2,
        "each front end asked once"
    );
}
