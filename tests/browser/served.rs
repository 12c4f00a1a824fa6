//! A served pipeline for the page's browser tests: `treadle serve` (the real binary) on a
//! temp dir, the scripted model server for its agents, and a headless Chromium. Included
//! by the test files that also declare `mod browser;` and `mod common;`.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

use crate::browser::Browser;
use crate::common::Fixture;
use crate::common::server::Server;

pub const WAIT: Duration = Duration::from_secs(60);

/// A served pipeline, its model and a browser.
pub struct Page {
    pub rt: tokio::runtime::Runtime,
    _model: Option<ScriptedServer>,
    pub server: Server,
    _fixture: Fixture,
    pub b: Browser,
}

impl Page {
    /// `treadle serve` on `yaml`, agents answered by `replies` (each streamed piece after
    /// `delay`), and a browser; `None` (printed) without a browser.
    pub fn start(test: &str, yaml: &str, replies: Vec<Reply>, delay: Duration) -> Option<Self> {
        Self::start_with_token(test, yaml, replies, delay, None)
    }

    /// `treadle serve` on a pipeline without agents, and a browser.
    pub fn tasks(test: &str, yaml: &str) -> Option<Self> {
        Self::start(test, yaml, Vec::new(), Duration::ZERO)
    }

    /// The same, the server requiring `token` (`--token-env`) when one is given.
    pub fn start_with_token(
        test: &str,
        yaml: &str,
        replies: Vec<Reply>,
        delay: Duration,
        token: Option<&str>,
    ) -> Option<Self> {
        let script = (!replies.is_empty()).then(|| Script::new(replies));
        Self::serve(test, yaml, script, delay, token, &[], &[])
    }

    /// The same, `treadle serve` given `args` more and `env` more.
    pub fn start_with(
        test: &str,
        yaml: &str,
        replies: Vec<Reply>,
        delay: Duration,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Option<Self> {
        let script = (!replies.is_empty()).then(|| Script::new(replies));
        Self::serve(test, yaml, script, delay, None, args, env)
    }

    /// `treadle serve` on `yaml`, its agents answered by `script`, and a browser.
    pub fn start_script(test: &str, yaml: &str, script: Script) -> Option<Self> {
        Self::serve(test, yaml, Some(script), Duration::ZERO, None, &[], &[])
    }

    fn serve(
        test: &str,
        yaml: &str,
        script: Option<Script>,
        delay: Duration,
        token: Option<&str>,
        extra_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Option<Self> {
        let b = Browser::start(test)?;
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let model = script.map(|script| {
            rt.block_on(ScriptedServer::builder().chunk_delay(delay).start(script))
                .expect("scripted server")
        });
        let fixture = Fixture::new(yaml);
        let mut env: Vec<(&str, &str)> = model
            .as_ref()
            .map(|m| vec![("TREADLE_LOCAL_URL", m.base_url())])
            .unwrap_or_default();
        let mut args = vec!["treadle.yml"];
        if let Some(token) = token {
            env.push(("TREADLE_PAGE_TOKEN", token));
            args.extend(["--token-env", "TREADLE_PAGE_TOKEN"]);
        }
        args.extend(extra_args);
        env.extend(extra_env);
        let server = Server::start(fixture.path(), &args, &env);
        Some(Self {
            rt,
            _model: model,
            server,
            _fixture: fixture,
            b,
        })
    }

    pub fn get(&self, path: &str) -> Value {
        let url = self.server.url(path);
        self.rt.block_on(async {
            self.server
                .http()
                .get(&url)
                .send()
                .await
                .expect("GET")
                .json::<Value>()
                .await
                .expect("JSON")
        })
    }

    pub fn post(&self, path: &str, body: Value) -> Value {
        let url = self.server.url(path);
        self.rt.block_on(async {
            self.server
                .http()
                .post(&url)
                .json(&body)
                .send()
                .await
                .expect("POST")
                .json::<Value>()
                .await
                .expect("JSON")
        })
    }

    /// Starts a run of the pipeline through the API; answers its id.
    pub fn start_run(&self) -> u64 {
        self.post("/api/v1/runs", json!({"pipeline": "treadle"}))["id"]
            .as_u64()
            .expect("run id")
    }

    pub fn wait_run(&self, id: u64) -> Value {
        let started = Instant::now();
        loop {
            let run = self.get(&format!("/api/v1/runs/{id}"));
            if run["status"] != json!("running") {
                return run;
            }
            assert!(started.elapsed() < WAIT, "run {id} never ended: {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Opens a page of the server and waits until its script has shown it.
    pub fn open(&self, path: &str) {
        self.b.goto(&self.server.page(path));
        self.b.wait_for(
            "the page to load",
            "document.body.dataset.ready === 'true'",
            WAIT,
        );
    }

    /// The page's text of step `seq`'s row.
    pub fn row(&self, seq: u64) -> String {
        self.b
            .eval(
                "const r = document.querySelector(`#step-${arguments[0]} > .row`); return r ? r.textContent : null;",
                json!([seq]),
            )
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// A pipeline whose first step asks a question (how many replicas, an integer from 1 to 9)
/// and whose second, `scale`, prints the answer it reads.
pub const REPLICAS: &str = "jobs:\n  - name: main\n    plan:\n      - input: replicas\n        question: How many replicas?\n        schema: { type: integer, minimum: 1, maximum: 9 }\n        outputs: [answer]\n      - task: scale\n        inputs: [answer]\n        run: echo \"scaling to $(cat answer/answer.json)\"\n";

impl Page {
    /// Answers the [`REPLICAS`] question of run `id` from its form inside `scope` (a CSS
    /// selector of the page the form is on): the form shows the question; 12 is refused with
    /// the server's reason and the question stays open; 3 is accepted. Waits for the run to
    /// end and checks that it succeeded with the answer read by `scale`; answers the run.
    pub fn answer_replicas(&self, id: u64, scope: &str) -> Value {
        let form = format!("{scope} form.question-form");
        self.b.wait_for(
            "the question's form",
            &format!("document.querySelector('{form} input[type=number][max=\"9\"]')"),
            WAIT,
        );
        let text = self.b.eval(
            &format!("return document.querySelector('{form} .q-text').textContent"),
            json!([]),
        );
        assert_eq!(text, json!("How many replicas?"));

        // Out of the schema's range: refused, with the server's reason, and still open.
        self.b
            .type_into(&format!("{form} input[type=number]"), "12");
        self.b.click(&format!("{form} button.answer"));
        let refused = self.b.wait_for(
            "the refusal",
            &format!("document.querySelector('{form} .q-status')?.textContent || null"),
            WAIT,
        );
        assert!(
            refused.as_str().unwrap_or_default().contains("maximum"),
            "{refused}"
        );
        let pending = self.get("/api/v1/approvals?state=pending");
        assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
        assert_eq!(pending[0]["question"]["schema"]["maximum"], json!(9));

        self.b.eval(
            &format!("document.querySelector('{form} input[type=number]').value = ''"),
            json!([]),
        );
        self.b.type_into(&format!("{form} input[type=number]"), "3");
        self.b.click(&format!("{form} button.answer"));
        let run = self.wait_run(id);
        assert_eq!(run["status"], json!("succeeded"), "{run}");
        let scale = run["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == "scale")
            .cloned()
            .unwrap_or_default();
        assert!(
            scale["output_tail"]
                .as_str()
                .is_some_and(|t| t.contains("scaling to 3")),
            "{scale}"
        );
        run
    }
}

/// The run's journal as the API streams it after the run ended: `(kind, data)` in order.
pub fn journal(p: &Page, id: u64) -> Vec<(String, Value)> {
    let url = p.server.url(&format!("/api/v1/runs/{id}/events"));
    let body = p.rt.block_on(async {
        p.server
            .http()
            .get(&url)
            .send()
            .await
            .expect("events")
            .text()
            .await
            .expect("events body")
    });
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim_start().to_owned())
        };
        if let (Some(_), Some(kind), Some(data)) = (field("id:"), field("event:"), field("data:")) {
            out.push((kind, serde_json::from_str(&data).expect("event data")));
        }
    }
    out
}
