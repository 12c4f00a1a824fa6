//! The run page of `treadle serve` in a real headless Chromium, live: start a run from the
//! page and see its tokens arrive, reload mid-run without losing or doubling anything, a
//! hostile model answer rendered inert, and the README's screenshot.

use crate::common;
use crate::served;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use served::{Page, WAIT, journal};
use treadle_scripted::Reply;

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
    // Tokens arrive live: sampled in the page, the streaming text is seen at several
    // lengths before the answer is complete, each a piece of the answer extending the one
    // before. (Tokens streamed before the page subscribed are not replayed, so the first
    // sample may start inside the answer.)
    let seen = p.b.eval_async(
        r#"
        const full = arguments[0];
        const lengths = new Set();
        let last = '';
        const started = Date.now();
        while (Date.now() - started < 60000) {
            const t = document.querySelector('.live')?.textContent;
            if (t && t.length < full.length) {
                if (!full.includes(t) || !t.startsWith(last)) return {bad: t, last};
                last = t;
                lengths.add(t.length);
                if (lengths.size >= 3) break;
            }
            if (document.querySelector('.turn-text')) break;
            await new Promise((r) => setTimeout(r, 15));
        }
        return {lengths: [...lengths]};
        "#,
        json!([LONG_ANSWER]),
    );
    assert!(
        seen.get("bad").is_none(),
        "live text not a growing piece of the answer: {seen}"
    );
    assert_eq!(
        seen["lengths"].as_array().map(Vec::len),
        Some(3),
        "the answer was not seen growing token by token: {seen}"
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
fn a_reload_mid_run_loses_and_doubles_nothing() {
    // The task prints five lines and then waits for the test to have reloaded the page
    // once (the gate file; at most a minute), so the first reload always lands while it
    // prints however long the browser took to open the page. Unconfined: the gate is
    // outside its step directory.
    let gate_dir = tempfile::tempdir().expect("gate dir");
    let gate = gate_dir.path().join("reloaded");
    let yaml = format!(
        "agents:\n  - name: worker\n    system: You read.\n    tools: [read_file]\njobs:\n  - name: main\n    plan:\n      - task: count\n        outputs: [out]\n        confined: false\n        run: for i in $(seq 1 40); do echo line-$i; if [ $i = 5 ]; then for w in $(seq 1 1200); do [ -e {gate} ] && break; sleep 0.05; done; fi; sleep 0.05; done; echo note > out/n.txt\n      - agent: worker\n        inputs: [out]\n        prompt: Read out/n.txt, several times.\n",
        gate = gate.display()
    );
    let read = || Reply::tool_call("read_file", json!({"path": "out/n.txt"}));
    let Some(p) = Page::start(
        "a_reload_mid_run_loses_and_doubles_nothing",
        &yaml,
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
        std::fs::write(&gate, "").expect("open the gate");
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
