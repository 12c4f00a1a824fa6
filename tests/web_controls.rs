//! The page's controls in a real headless Chromium against `treadle serve`: fold a block,
//! answer approvals (run page and approvals page), cancel a run, the runs list with its
//! charts, and the token the page was opened with.

use crate::served;

use std::time::Duration;

use serde_json::json;
use served::{Page, WAIT};

#[test]
fn a_block_folds_and_says_what_is_inside() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - in_parallel:\n          - task: lint\n            run: echo linting\n          - task: unit\n            run: echo testing\n          - task: flaky\n            run: exit 3\n      - task: after\n        run: echo never\n";
    let Some(p) = Page::tasks("a_block_folds_and_says_what_is_inside", yaml) else {
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
    let Some(p) = Page::tasks(
        "approvals_are_answered_from_the_page_and_the_run_goes_on",
        yaml,
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

#[test]
fn a_run_is_cancelled_from_the_page_and_the_list_charts_the_runs() {
    let yaml = "jobs:\n  - name: quick\n    plan:\n      - task: hello\n        run: echo hello\n  - name: slow\n    plan:\n      - task: wait\n        run: sleep 30\n";
    let Some(p) = Page::tasks(
        "a_run_is_cancelled_from_the_page_and_the_list_charts_the_runs",
        yaml,
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
