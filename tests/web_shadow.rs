//! A shadow run on the page, in a real headless Chromium against `treadle serve`: a finished
//! examples/review.yml run (scripted model) is shadowed on another model from its run page;
//! the page opens `/compare/1/shadow/1`, which shows the run's reviewer beside the shadow's:
//! the verdicts (approve → reject), the calls aligned with the first difference marked,
//! and tokens on both sides; the run page then links to it. Under
//! `scripts/screenshot` (TREADLE_SCREENSHOT_SHADOW=docs/shadow-page.png) it is saved into
//! docs/.

use crate::web_fork::{screenshot, text_of};
use crate::{serve_shadow, served};

use serde_json::json;
use served::{Page, WAIT};

#[test]
fn a_review_shadowed_from_its_page_is_compared_with_its_shadow() {
    let Some(p) = Page::start_script(
        "a_review_shadowed_from_its_page_is_compared_with_its_shadow",
        &crate::common::example("review.yml"),
        serve_shadow::script(),
    ) else {
        return;
    };
    let first = p.start_run();
    let run = p.wait_run(first);
    assert_eq!(run["status"], json!("succeeded"), "{run}");

    // The run page offers to shadow it; no shadow is listed yet.
    p.open(&format!("/runs/{first}"));
    p.b.wait_for(
        "the shadow form",
        "!!document.querySelector('.shadows form.shadow-form')",
        WAIT,
    );
    assert_eq!(
        p.b.eval(
            "return document.querySelectorAll('.shadow-item').length",
            json!([])
        ),
        json!(0)
    );
    let model = format!("local/{}", serve_shadow::OTHER);
    p.b.type_into(".shadow-form input.shadow-model", &model);
    p.b.click(".shadow-form button");
    p.b.resize(1200, 800);
    p.b.wait_for(
        "the shadow's comparison",
        &format!("location.pathname === '/compare/{first}/shadow/1' && document.body.dataset.compare === 'ready'"),
        WAIT,
    );

    assert_eq!(
        text_of(&p, ".compare-totals .t-status .side-b"),
        json!("changed")
    );
    assert_eq!(
        text_of(&p, ".compare-totals .t-model .side-b"),
        json!(model)
    );
    for side in ["side-a", "side-b"] {
        let tokens = text_of(&p, &format!(".compare-totals .t-tokens .{side}"));
        assert!(
            tokens.as_str().is_some_and(|t| t.ends_with(" tokens")),
            "{tokens}"
        );
    }
    // The draft task is not run again; the reviewer's row is marked, its verdict changed.
    let draft = text_of(&p, "tr.step-row[data-path='0'] .side-b");
    assert_eq!(draft, json!("not run again"));
    let reviewer = "tr.step-row[data-path='1']";
    assert_eq!(
        p.b.eval(
            "return document.querySelector(arguments[0]).classList.contains('differs')",
            json!([reviewer])
        ),
        json!(true)
    );
    assert_eq!(
        text_of(&p, &format!("{reviewer} .side-a .verdict")),
        json!(" verdict: approve")
    );
    assert_eq!(
        text_of(&p, &format!("{reviewer} .side-b .verdict-changed")),
        json!(" verdict: approve → reject")
    );
    assert_eq!(
        p.b.eval(
            "return document.querySelectorAll(arguments[0]).length",
            json!([format!("{reviewer} .side-b .assert-fails")])
        ),
        json!(0),
        "its asserts still hold"
    );
    // The calls, verdict left out: the read alike, the write not, and marked first.
    let calls = p.b.eval(
        "return [...document.querySelectorAll(\"tr.calls-row[data-path='1'] tr.call-row\")].map((r) => [r.querySelector('.call-a').textContent, r.querySelector('.call-b').textContent, r.classList.contains('differs'), r.classList.contains('first-difference')])",
        json!([]),
    );
    let rows = calls.as_array().expect("call rows");
    assert_eq!(rows.len(), 2, "{calls}");
    assert_eq!(rows[0][2], json!(false), "{calls}");
    assert!(
        rows[0][1]
            .as_str()
            .is_some_and(|c| c.starts_with("read_file")),
        "{calls}"
    );
    assert_eq!(
        (rows[1][2].clone(), rows[1][3].clone()),
        (json!(true), json!(true)),
        "{calls}"
    );
    assert!(
        rows[1][0]
            .as_str()
            .is_some_and(|c| c.contains("Fine notes."))
            && rows[1][1].as_str().is_some_and(|c| c.contains("Not sure.")),
        "{calls}"
    );
    p.b.eval("document.activeElement?.blur()", json!([]));
    screenshot(&p, "TREADLE_SCREENSHOT_SHADOW", "shadow");

    // Not a run; the run page now links to it.
    let runs = p.get("/api/v1/runs");
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    p.open(&format!("/runs/{first}"));
    let link = p.b.wait_for(
        "the shadow's link",
        "document.querySelector('.shadow-item a.shadow-link')?.getAttribute('href')",
        WAIT,
    );
    assert_eq!(link, json!(format!("/compare/{first}/shadow/1")));
    let item = text_of(&p, ".shadow-item");
    assert!(
        item.as_str().is_some_and(|i| i.ends_with("changed")),
        "{item}"
    );
    screenshot(&p, "TREADLE_SCREENSHOT_SHADOW_RUN", "shadow-run");
}
