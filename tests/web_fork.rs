//! "Fork from here" and the comparison view in a real headless Chromium against
//! `treadle serve`: a finished examples/review.yml run (scripted model) is forked from its
//! reviewer's turn with an edited message; the fork has its own transcript, the parent's
//! events and record are as they were, and `/compare/1/2` shows both runs side by side.
//! Under `scripts/screenshot` (TREADLE_SCREENSHOT_COMPARE=docs/compare-page.png) the
//! comparison is saved into docs/.

use crate::{common, serve_fork, served};

use serde_json::{Value, json};
use served::{Page, WAIT};

/// The text of the first element matching `css` (null when none).
pub fn text_of(p: &Page, css: &str) -> Value {
    p.b.eval(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        json!([css]),
    )
}

#[test]
fn a_review_forked_from_the_page_is_compared_with_its_untouched_parent() {
    let Some(p) = Page::start_script(
        "a_review_forked_from_the_page_is_compared_with_its_untouched_parent",
        &common::example("review.yml"),
        serve_fork::review_script(),
    ) else {
        return;
    };
    let first = p.start_run();
    let parent = p.wait_run(first);
    assert_eq!(parent["status"], json!("succeeded"), "{parent}");
    let reviewer = parent["steps"][1]["seq"].as_u64().expect("reviewer seq");
    let parent_events = served::journal(&p, first);
    assert!(
        parent_events
            .iter()
            .any(|(_, d)| d.to_string().contains("Fine notes.")),
        "{parent_events:?}"
    );

    // The reviewer's turn, its message prefilled, edited and forked from the run page.
    p.open(&format!("/runs/{first}"));
    let fork_box = format!("#step-{reviewer} details.fork");
    p.b.wait_for(
        "the fork box",
        &format!("!!document.querySelector('{fork_box}')?.offsetParent"),
        WAIT,
    );
    p.b.click(&format!("{fork_box} > summary"));
    let turn = format!("{fork_box} .fork-turn[data-turn='1']");
    let prefilled = p.b.wait_for(
        "turn 1's message",
        &format!("document.querySelector(\"{turn} textarea\")?.value"),
        WAIT,
    );
    assert!(
        prefilled
            .as_str()
            .is_some_and(|m| m.starts_with("Do these three steps")),
        "{prefilled}"
    );
    // A form after the turn, to go on from it, starts empty.
    let after = text_of(
        &p,
        &format!("{fork_box} .fork-turn[data-turn='after-1'] code"),
    );
    assert_eq!(after, json!("--at 1/1"));
    p.b.eval(
        "document.querySelector(arguments[0]).value = ''",
        json!([format!("{turn} textarea")]),
    );
    p.b.type_into(&format!("{turn} textarea"), serve_fork::AGAIN);
    p.b.click(&format!("{turn} button.fork-submit"));
    let second = first + 1;
    p.b.wait_for(
        "the fork's page",
        &format!(
            "location.pathname === '/runs/{second}' && document.body.dataset.ready === 'true'"
        ),
        WAIT,
    );
    let fork = p.wait_run(second);
    assert_eq!(fork["status"], json!("succeeded"), "{fork}");
    // Asked at an outline path; the step is named too.
    let name = parent["steps"][1]["name"]
        .as_str()
        .expect("reviewer name")
        .to_owned();
    assert_eq!(
        fork["forked_from"],
        json!({"run": first, "at": "1", "step": name})
    );
    assert_eq!(fork["trigger"], json!("web"));

    // Its own transcript: the new review, none of the old one; the parent's is as it was.
    let fork_events = served::journal(&p, second);
    let said = |events: &[(String, Value)], text: &str| {
        events.iter().any(|(_, d)| d.to_string().contains(text))
    };
    assert!(said(&fork_events, "Second look."), "{fork_events:?}");
    assert!(!said(&fork_events, "Fine notes."), "{fork_events:?}");
    assert_eq!(served::journal(&p, first), parent_events);
    assert_eq!(p.get(&format!("/api/v1/runs/{first}")), parent);

    // The fork's page names its parent and opens the comparison.
    p.b.wait_for(
        "the fork's answer",
        "document.querySelector('.turn-text')?.textContent.includes('Second look.')",
        WAIT,
    );
    let note = text_of(&p, ".fork-note");
    assert!(
        note.as_str()
            .is_some_and(|n| n.contains(&format!("fork of run #{first} at {name}"))),
        "{note}"
    );
    p.b.resize(1200, 800);
    p.b.click(".fork-note a.compare-link");
    p.b.wait_for(
        "the comparison",
        &format!("location.pathname === '/compare/{first}/{second}' && document.body.dataset.compare === 'ready'"),
        WAIT,
    );
    check_comparison(&p, first, second);
    screenshot(&p, "TREADLE_SCREENSHOT_COMPARE", "compare");
}

/// The comparison of the review and its fork: both runs' facts, the draft taken from the
/// parent, the reviewer's calls aligned, the first alike and the summary's write not.
fn check_comparison(p: &Page, first: u64, second: u64) {
    assert_eq!(
        text_of(p, ".compare-totals .t-run .side-a"),
        json!(format!("#{first}"))
    );
    assert_eq!(
        text_of(p, ".compare-totals .t-run .side-b"),
        json!(format!("#{second}"))
    );
    // The step forked at, by name (it was asked at its outline path, `1`).
    let fork_at = text_of(p, ".compare-totals .t-fork .side-b");
    assert!(
        fork_at
            .as_str()
            .is_some_and(|t| t.starts_with(&format!("run #{first} at ")) && !t.ends_with(" at 1")),
        "{fork_at}"
    );
    // The reviewer's prompts side by side: the fork's edited one, marked, beside the
    // parent's.
    let prompts = p.b.eval(
        "const r = document.querySelector(\"tr.prompts-row[data-path='1']\"); return r && [r.classList.contains('differs'), r.querySelector('.side-a').textContent, r.querySelector('.side-b').textContent, [...r.querySelectorAll('.side-b .line.changed')].map((l) => l.textContent)];",
        json!([]),
    );
    assert_eq!(prompts[0], json!(true), "{prompts}");
    assert!(
        prompts[1]
            .as_str()
            .is_some_and(|a| a.contains("Do these three steps")),
        "{prompts}"
    );
    assert!(
        prompts[2]
            .as_str()
            .is_some_and(|b| b.contains(serve_fork::AGAIN)),
        "{prompts}"
    );
    assert!(
        prompts[3]
            .as_array()
            .is_some_and(|changed| changed.iter().any(|l| l == serve_fork::AGAIN)),
        "the edited prompt is not marked: {prompts}"
    );
    // Both spent tokens (the scripted usage), shown on each side.
    for side in ["side-a", "side-b"] {
        let tokens = text_of(p, &format!(".compare-totals .t-tokens .{side}"));
        assert!(
            tokens.as_str().is_some_and(|t| t.ends_with(" tokens")),
            "{tokens}"
        );
    }
    let draft = text_of(p, "tr.step-row[data-path='0'] .side-b");
    assert!(
        draft
            .as_str()
            .is_some_and(|t| t.contains(&format!("cached from #{first}"))),
        "{draft}"
    );
    let verdicts = p.b.eval(
        "return [...document.querySelectorAll(\"tr.step-row[data-path='1'] .verdict\")].map((v) => v.textContent)",
        json!([]),
    );
    assert_eq!(verdicts, json!([" verdict: approve", " verdict: approve"]));
    let calls = p.b.eval(
        "return [...document.querySelectorAll(\"tr.calls-row[data-path='1'] tr.call-row\")].map((r) => [r.querySelector('.call-a').textContent, r.querySelector('.call-b').textContent, r.classList.contains('differs')])",
        json!([]),
    );
    let rows = calls.as_array().expect("call rows");
    assert_eq!(rows.len(), 3, "{calls}");
    assert_eq!(rows[0][2], json!(false), "the same read: {calls}");
    assert!(
        rows[0][0]
            .as_str()
            .is_some_and(|c| c.starts_with("read_file")),
        "{calls}"
    );
    assert_eq!(rows[1][2], json!(true), "another summary: {calls}");
    assert!(
        rows[1][0]
            .as_str()
            .is_some_and(|c| c.contains("Fine notes."))
            && rows[1][1]
                .as_str()
                .is_some_and(|c| c.contains("Second look.")),
        "{calls}"
    );
}

/// The page as a PNG into the file `var` names (docs/compare-page.png and the like under
/// `scripts/screenshot`); a temp file named after `stem` otherwise, checked to be a PNG
/// either way.
pub fn screenshot(p: &Page, var: &str, stem: &str) {
    p.b.eval("document.activeElement?.blur()", json!([]));
    let png = p.b.screenshot_png();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().expect("width"));
    assert!(width >= 1000, "screenshot {width} px wide");
    let target = match std::env::var_os(var) {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::temp_dir().join(format!("treadle-{stem}-{}.png", std::process::id())),
    };
    std::fs::write(&target, &png).expect("write the screenshot");
    eprintln!("screenshot: {}", target.display());
}
