//! The run page of `treadle serve` in a real headless Chromium, against the real binary
//! serving a temp dir and the scripted model server: start a run from the page and see
//! its tokens arrive, fold a block, approve from the page, reload mid-run without losing
//! or doubling anything, and a hostile model answer rendered inert.

mod browser;
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use browser::Browser;
use common::Fixture;
use common::server::Server;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

const WAIT: Duration = Duration::from_secs(60);

/// A served pipeline, its model and a browser.
struct Page {
    rt: tokio::runtime::Runtime,
    _model: Option<ScriptedServer>,
    server: Server,
    _fixture: Fixture,
    b: Browser,
}

impl Page {
    /// `treadle serve` on `yaml`, agents answered by `replies` (each streamed piece after
    /// `delay`), and a browser; `None` (printed) without a browser.
    fn start(test: &str, yaml: &str, replies: Vec<Reply>, delay: Duration) -> Option<Self> {
        Self::start_with_token(test, yaml, replies, delay, None)
    }

    /// The same, the server requiring `token` (`--token-env`) when one is given.
    fn start_with_token(
        test: &str,
        yaml: &str,
        replies: Vec<Reply>,
        delay: Duration,
        token: Option<&str>,
    ) -> Option<Self> {
        let b = Browser::start(test)?;
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let model = (!replies.is_empty()).then(|| {
            rt.block_on(
                ScriptedServer::builder()
                    .chunk_delay(delay)
                    .start(Script::new(replies)),
            )
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
        let server = Server::start(fixture.path(), &args, &env);
        Some(Self {
            rt,
            _model: model,
            server,
            _fixture: fixture,
            b,
        })
    }

    fn get(&self, path: &str) -> Value {
        let url = self.server.url(path);
        self.rt.block_on(async {
            common::http()
                .get(&url)
                .send()
                .await
                .expect("GET")
                .json::<Value>()
                .await
                .expect("JSON")
        })
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let url = self.server.url(path);
        self.rt.block_on(async {
            common::http()
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
    fn start_run(&self) -> u64 {
        self.post("/api/v1/runs", json!({"pipeline": "treadle"}))["id"]
            .as_u64()
            .expect("run id")
    }

    fn wait_run(&self, id: u64) -> Value {
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
    fn open(&self, path: &str) {
        self.b.goto(&self.server.url(path));
        self.b.wait_for(
            "the page to load",
            "document.body.dataset.ready === 'true'",
            WAIT,
        );
    }

    /// The page's text of step `seq`'s row.
    fn row(&self, seq: u64) -> String {
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

const LONG_ANSWER: &str = "The launch is on schedule. Every check passed and the crew is \
    ready; the weather window opens at dawn and stays open for three hours, which is more \
    than enough for the final countdown and the climb to orbit.";

#[test]
fn a_run_started_from_the_page_streams_its_tokens() {
    let yaml = "agents:\n  - name: talker\n    system: You talk.\njobs:\n  - name: main\n    plan:\n      - task: prepare\n        run: echo ready\n      - agent: talker\n        prompt: Tell me about the launch.\n";
    let Some(p) = Page::start(
        "a_run_started_from_the_page_streams_its_tokens",
        yaml,
        vec![Reply::text(LONG_ANSWER).usage(30, 60)],
        Duration::from_millis(60),
    ) else {
        return;
    };
    p.open("/");
    p.b.wait_for(
        "the start button",
        "document.querySelector('button.start')",
        WAIT,
    );
    p.b.click("button.start");
    p.b.wait_for(
        "the run page",
        "/^\\/runs\\/\\d+$/.test(location.pathname) && document.body.dataset.ready === 'true'",
        WAIT,
    );
    // Tokens arrive live: the streaming text grows while the answer is not yet complete.
    let first = p.b.wait_for(
        "the first tokens",
        "(document.querySelector('.live')?.textContent || '').length",
        WAIT,
    );
    // Read in one go: the live element goes away once the answer is complete.
    let live = p.b.wait_for(
        "more tokens",
        &format!("(() => {{ const t = document.querySelector('.live')?.textContent || ''; return t.length > {first} + 8 ? t : null; }})()"),
        WAIT,
    );
    let live = live.as_str().expect("live text");
    assert!(
        LONG_ANSWER.starts_with(live) && live.len() < LONG_ANSWER.len(),
        "the live text is a proper prefix of the answer: {live}"
    );
    // Then the run settles: the answer as markdown, no live text left, the run succeeded.
    p.b.wait_for(
        "the run to succeed",
        "document.querySelector('.run-head .badge')?.textContent === 'succeeded'",
        WAIT,
    );
    p.b.wait_for(
        "the answer",
        "document.querySelector('.turn-text')?.textContent.includes('climb to orbit')",
        WAIT,
    );
    let left = p.b.eval(
        "return document.querySelectorAll('.live').length",
        json!([]),
    );
    assert_eq!(left, json!(0), "live text left after the run ended");
    let id: u64 =
        p.b.eval("return location.pathname.split('/').pop()", json!([]))
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("run id");
    let run = p.get(&format!("/api/v1/runs/{id}"));
    assert_eq!(run["trigger"], json!("web"), "{run}");
    // Tokens and cost per run: a local model has no price, so it says so.
    let head = p.b.eval(
        "return document.querySelector('.run-head').textContent",
        json!([]),
    );
    let head = head.as_str().unwrap_or_default();
    assert!(
        head.contains("90 tokens") && head.contains("unpriced"),
        "{head}"
    );
    assert!(!head.contains("$0.00"), "{head}");
}

#[test]
fn a_block_folds_and_says_what_is_inside() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - in_parallel:\n          - task: lint\n            run: echo linting\n          - task: unit\n            run: echo testing\n          - task: flaky\n            run: exit 3\n      - task: after\n        run: echo never\n";
    let Some(p) = Page::start(
        "a_block_folds_and_says_what_is_inside",
        yaml,
        vec![],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("failed"), "{run}");
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "the stream to end",
        "document.body.dataset.stream === 'ended'",
        WAIT,
    );
    let block = run["steps"][0]["seq"].as_u64().expect("block seq");
    let child = run["steps"][0]["children"][0]["seq"]
        .as_u64()
        .expect("child seq");
    p.b.wait_for(
        "the block's count",
        &format!("document.querySelector('#step-{block} > .row .count')?.textContent === '3 steps · 2 passed · 1 failed'"),
        WAIT,
    );
    let visible = |seq: u64| {
        p.b.eval(
            "const r = document.querySelector(`#step-${arguments[0]} > .row`); return !!(r && r.offsetParent);",
            json!([seq]),
        )
    };
    assert_eq!(
        visible(child),
        json!(true),
        "a failed run's block starts open"
    );
    // The failed run leads with its failing step: the task inside the block, not the block.
    let failure = p.b.eval(
        "return document.querySelector('.failure').textContent",
        json!([]),
    );
    assert!(
        failure.as_str().unwrap_or_default().contains("task flaky"),
        "{failure}"
    );
    p.b.click(&format!("#step-{block} > .row .name"));
    assert_eq!(
        visible(child),
        json!(false),
        "folded block still shows its children"
    );
    assert!(
        p.row(block).contains("3 steps · 2 passed · 1 failed"),
        "{}",
        p.row(block)
    );
    p.b.click(&format!("#step-{block} > .row .name"));
    assert_eq!(
        visible(child),
        json!(true),
        "unfolded block hides its children"
    );
}

#[test]
fn approvals_are_answered_from_the_page_and_the_run_goes_on() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - task: build\n        run: echo built\n      - approval: ship\n        message: Ship the build?\n      - task: publish\n        run: echo published\n      - approval: announce\n        message: Announce it?\n      - task: tell\n        run: echo told\n";
    let Some(p) = Page::start(
        "approvals_are_answered_from_the_page_and_the_run_goes_on",
        yaml,
        vec![],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    // The first from the run page, with a comment.
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "the approve button",
        "document.querySelector('.approval button.approve')",
        WAIT,
    );
    let message = p.b.eval(
        "return document.querySelector('.approval').textContent",
        json!([]),
    );
    assert!(
        message
            .as_str()
            .unwrap_or_default()
            .contains("Ship the build?"),
        "{message}"
    );
    p.b.type_into(".approval input.ap-comment", "looks good");
    p.b.click(".approval button.approve");
    let run = p.get(&format!("/api/v1/runs/{id}"));
    let publish = run["steps"][2]["seq"].as_u64().expect("seq");
    p.b.wait_for(
        "the run to go on",
        &format!("document.querySelector('#step-{publish}')?.classList.contains('st-succeeded')"),
        WAIT,
    );
    // The second from the approvals page: rejected, so the run fails there.
    p.open("/approvals");
    p.b.wait_for(
        "the pending approval",
        "document.querySelector('.approvals-pending li.approval')?.textContent.includes('Announce it?')",
        WAIT,
    );
    p.b.type_into(".approvals-pending input.ap-comment", "not today");
    p.b.click(".approvals-pending button.reject");
    let decided = p.b.wait_for(
        "two decisions",
        "document.querySelectorAll('.approvals-decided tbody tr').length === 2 && [...document.querySelectorAll('.approvals-decided tbody tr')].map((r) => [...r.cells].slice(1).map((c) => c.textContent))",
        WAIT,
    );
    assert_eq!(
        decided,
        json!([
            [
                "announce",
                "Announce it?",
                "rejected",
                "web",
                decided[0][4],
                "not today"
            ],
            [
                "ship",
                "Ship the build?",
                "approved",
                "web",
                decided[1][4],
                "looks good"
            ],
        ]),
        "{decided}"
    );
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("failed"), "{run}");
    assert_eq!(run["steps"][4]["status"], json!("skipped"), "{run}");
}

/// The run's journal as the API streams it after the run ended: `(kind, data)` in order.
fn journal(p: &Page, id: u64) -> Vec<(String, Value)> {
    let url = p.server.url(&format!("/api/v1/runs/{id}/events"));
    let body = p.rt.block_on(async {
        common::http()
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

#[test]
fn a_reload_mid_run_loses_and_doubles_nothing() {
    let yaml = "agents:\n  - name: worker\n    system: You read.\n    tools: [read_file]\njobs:\n  - name: main\n    plan:\n      - task: count\n        outputs: [out]\n        run: for i in $(seq 1 40); do echo line-$i; sleep 0.05; done; echo note > out/n.txt\n      - agent: worker\n        inputs: [out]\n        prompt: Read out/n.txt, several times.\n";
    let read = || Reply::tool_call("read_file", json!({"path": "out/n.txt"}));
    let Some(p) = Page::start(
        "a_reload_mid_run_loses_and_doubles_nothing",
        yaml,
        vec![
            read(),
            read(),
            read(),
            read(),
            Reply::text("First line of the answer.\nSecond line, **bold**.\nThird line.")
                .usage(50, 20),
        ],
        Duration::from_millis(30),
    ) else {
        return;
    };
    let id = p.start_run();
    p.open(&format!("/runs/{id}"));
    // Reload at three moments: while the task prints, at the first tool call, at the third.
    for (what, condition) in [
        (
            "a few lines",
            "(document.querySelector('pre.output')?.textContent || '').includes('line-5')",
        ),
        (
            "a tool call",
            "document.querySelectorAll('.call').length >= 1",
        ),
        (
            "three tool calls",
            "document.querySelectorAll('.call').length >= 3",
        ),
    ] {
        p.b.wait_for(what, condition, WAIT);
        p.b.reload();
        p.b.wait_for(
            "the page to load",
            "document.body.dataset.ready === 'true'",
            WAIT,
        );
    }
    p.b.wait_for(
        "the run to end",
        "document.querySelector('.run-head .badge')?.textContent === 'succeeded'",
        WAIT,
    );
    let run = p.wait_run(id);
    let task = run["steps"][0]["seq"].as_u64().expect("task seq");
    let agent = run["steps"][1]["seq"].as_u64().expect("agent seq");
    let events = journal(&p, id);
    let lines: Vec<Value> = events
        .iter()
        .filter(|(k, d)| k == "output" && d["seq"] == json!(task))
        .map(|(_, d)| d["line"].clone())
        .collect();
    assert_eq!(lines.len(), 40, "the journal has every line");
    let calls = events
        .iter()
        .filter(|(k, d)| {
            k == "agent" && d["seq"] == json!(agent) && d["what"] == json!("tool_call")
        })
        .count();
    let results = events
        .iter()
        .filter(|(k, d)| {
            k == "agent" && d["seq"] == json!(agent) && d["what"] == json!("tool_result")
        })
        .count();
    assert_eq!((calls, results), (4, 4), "the journal has every call");
    // Once settled, the page shows exactly the journal: each line once, in order.
    p.b.wait_for(
        "the answer",
        "document.querySelector('.turn-text')?.textContent.includes('Third line.')",
        WAIT,
    );
    // A finished task starts folded; the reader opens it.
    p.b.click(&format!("#step-{task} > .row .name"));
    let shown = p.b.eval(
        "return document.querySelector(`#step-${arguments[0]} pre.output`).textContent.split('\\n')",
        json!([task]),
    );
    assert_eq!(shown, Value::Array(lines), "task output on the page");
    let page_calls = p.b.eval(
        "const s = document.querySelector(`#step-${arguments[0]}`); return [s.querySelectorAll('.call').length, s.querySelectorAll('.call .result:not(.pending)').length, s.querySelectorAll('.turn-text').length, s.querySelector('.convo').textContent.split('First line').length - 1];",
        json!([agent]),
    );
    assert_eq!(page_calls, json!([4, 4, 1, 1]), "conversation on the page");
}

#[test]
fn a_hostile_answer_renders_inert() {
    let hits = Arc::new(AtomicUsize::new(0));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sink = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let sink_url = format!("http://{}", sink.local_addr().expect("addr"));
    let counter = hits.clone();
    rt.spawn(async move {
        while let Ok((_s, _)) = sink.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let answer = format!(
        "Here is the report.\n\n<script>window.__pwned = 1</script>\n\
         <img src=\"{sink_url}/raw.png\" onerror=\"window.__pwned = 2\">\n\n\
         ![chart]({sink_url}/chart.png)\n\n\
         [details](javascript:window.__pwned=3) and [docs](https://example.com/docs)\n"
    );
    let yaml = "agents:\n  - name: writer\n    system: You write.\njobs:\n  - name: main\n    plan:\n      - agent: writer\n        prompt: Write the report.\n";
    let Some(p) = Page::start(
        "a_hostile_answer_renders_inert",
        yaml,
        vec![Reply::text(answer)],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    assert_eq!(p.wait_run(id)["status"], json!("succeeded"));
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "the answer",
        "document.querySelector('.turn-text')?.textContent.includes('Here is the report.')",
        WAIT,
    );
    std::thread::sleep(Duration::from_millis(800));
    let out = p.b.eval(
        "const c = document.querySelector('.convo'); return {
            pwned: window.__pwned ?? 0,
            active: document.querySelectorAll('main script, main img, main iframe').length,
            text: c.textContent,
            hrefs: [...c.querySelectorAll('a')].map((a) => a.getAttribute('href')),
        };",
        json!([]),
    );
    assert_eq!(out["pwned"], json!(0), "a script ran: {out}");
    assert_eq!(out["active"], json!(0), "{out}");
    let text = out["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("<script>window.__pwned = 1</script>"),
        "{text}"
    );
    assert!(text.contains("image: chart (127.0.0.1:"), "{text}");
    let hrefs = out["hrefs"].as_array().expect("hrefs");
    assert!(
        hrefs
            .iter()
            .all(|h| !h.as_str().unwrap_or_default().starts_with("javascript")),
        "{out}"
    );
    assert!(hrefs.contains(&json!("https://example.com/docs")), "{out}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the browser fetched an image"
    );
}

/// The README's picture: the run page of examples/review.yml, finished, at 1200x800. Under
/// `scripts/screenshot` (TREADLE_SCREENSHOT=docs/run-page.png) it is written into docs/;
/// otherwise into a temp dir, and checked to be a PNG of that size either way.
#[test]
fn the_run_page_screenshot() {
    let replies = vec![
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})).usage(310, 22),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Two user-visible fixes, clearly stated."}),
        )
        .usage(402, 31),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "clear and accurate"}))
            .usage(451, 18),
        Reply::text(
            "**Approved.** The notes are short and accurate:\n\n- *faster startup* is measurable\n- the crash fix names its trigger (`empty files`)\n\nSummary written to `report/summary.md`.",
        )
        .usage(480, 40),
    ];
    let Some(p) = Page::start(
        "the_run_page_screenshot",
        &common::example("review.yml"),
        replies,
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("succeeded"));
    p.b.resize(1200, 800);
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "the answer",
        "document.querySelector('.turn-text')?.textContent.includes('Summary written')",
        WAIT,
    );
    // Open the last step's output too, as a reader would.
    let publish = run["steps"][3]["seq"].as_u64().expect("publish seq");
    p.b.click(&format!("#step-{publish} > .row .name"));
    p.b.eval("document.activeElement.blur()", json!([]));
    let png = p.b.screenshot_png();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().expect("width"));
    assert!(width >= 1000, "screenshot {width} px wide");
    let target = match std::env::var_os("TREADLE_SCREENSHOT") {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::temp_dir().join(format!("treadle-run-page-{}.png", std::process::id())),
    };
    std::fs::write(&target, &png).expect("write the screenshot");
    eprintln!("screenshot: {}", target.display());
}

#[test]
fn a_run_is_cancelled_from_the_page_and_the_list_charts_the_runs() {
    let yaml = "jobs:\n  - name: quick\n    plan:\n      - task: hello\n        run: echo hello\n  - name: slow\n    plan:\n      - task: wait\n        run: sleep 30\n";
    let Some(p) = Page::start(
        "a_run_is_cancelled_from_the_page_and_the_list_charts_the_runs",
        yaml,
        vec![],
        Duration::ZERO,
    ) else {
        return;
    };
    let start = |job: &str| {
        p.post("/api/v1/runs", json!({"pipeline": "treadle", "job": job}))["id"]
            .as_u64()
            .expect("run id")
    };
    for _ in 0..2 {
        let id = start("quick");
        assert_eq!(p.wait_run(id)["status"], json!("succeeded"));
    }
    let slow = start("slow");
    p.open(&format!("/runs/{slow}"));
    p.b.wait_for(
        "the task to run",
        "document.querySelector('#step-0')?.classList.contains('st-running')",
        WAIT,
    );
    assert!(
        p.b.eval("return document.title", json!([]))
            .as_str()
            .unwrap_or_default()
            .starts_with('◐'),
        "the tab says the run is running"
    );
    p.b.click("button.cancel");
    p.b.wait_for(
        "the run to be aborted",
        "document.querySelector('.run-head .badge')?.textContent === 'aborted'",
        WAIT,
    );
    assert_eq!(p.wait_run(slow)["status"], json!("aborted"));
    assert_eq!(
        p.b.eval(
            "return document.querySelectorAll('button.cancel').length",
            json!([])
        ),
        json!(0),
        "no cancel button on an ended run"
    );
    // The list: every run with its status and trigger, and a chart per job.
    p.open("/");
    let rows = p.b.wait_for(
        "three runs",
        "document.querySelectorAll('table.runs tbody tr').length === 3 && [...document.querySelectorAll('table.runs tbody tr')].map((r) => [...r.cells].map((c) => c.textContent))",
        WAIT,
    );
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows[0][1], json!("slow"), "newest first: {rows:?}");
    assert_eq!(rows[0][2], json!("aborted"), "{rows:?}");
    assert_eq!(rows[2][2], json!("succeeded"), "{rows:?}");
    assert!(rows.iter().all(|r| r[7] == json!("api")), "{rows:?}");
    let charts = p.b.eval(
        "return [...document.querySelectorAll('figure.chart')].map((f) => [f.querySelector('figcaption').textContent.split(':')[0], f.querySelectorAll('rect.bar').length])",
        json!([]),
    );
    assert_eq!(charts, json!([["slow", 1], ["quick", 2]]), "{charts}");
}

#[test]
fn the_page_carries_the_token_it_was_opened_with() {
    let token = "page-token-5d1f0c";
    let Some(p) = Page::start_with_token(
        "the_page_carries_the_token_it_was_opened_with",
        "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n",
        vec![],
        Duration::ZERO,
        Some(token),
    ) else {
        return;
    };
    p.b.goto(&p.server.url(&format!("/#token={token}")));
    p.b.wait_for(
        "the page to load",
        "document.body.dataset.ready === 'true'",
        WAIT,
    );
    let kept = p.b.eval(
        "return [location.hash, sessionStorage.getItem('treadle.token'), history.length]",
        json!([]),
    );
    assert_eq!(kept[0], json!(""), "the token left in the address: {kept}");
    assert_eq!(kept[1], json!(token), "{kept}");
    // The API refuses a request without it, so the page works because it sends it.
    let bare =
        p.b.eval_async("return (await fetch('/api/v1/runs')).status", json!([]));
    assert_eq!(bare, json!(401));
    p.b.click("button.start");
    p.b.wait_for(
        "the run to succeed on its page (snapshot and event stream)",
        "document.querySelector('.run-head .badge')?.textContent === 'succeeded' && document.body.dataset.stream === 'ended'",
        WAIT,
    );
    p.b.click("#step-0 > .row .name");
    let output = p.b.eval(
        "return document.querySelector('#step-0 pre.output')?.textContent",
        json!([]),
    );
    assert_eq!(output, json!("hello"));
}
