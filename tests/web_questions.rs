//! A question (an `input:` step) answered from the page in a real headless Chromium against
//! `treadle serve`: the approvals page shows a form generated from the question's schema,
//! an answer that does not fit is refused with the server's reason and the question stays
//! open, and a valid one continues the run, which reads the answer.

use crate::served;

use serde_json::json;
use served::Page;

#[test]
fn a_question_is_answered_from_a_form_built_from_its_schema() {
    let Some(p) = Page::tasks(
        "a_question_is_answered_from_a_form_built_from_its_schema",
        served::REPLICAS,
    ) else {
        return;
    };
    let id = p.start_run();
    p.open("/approvals");
    p.answer_replicas(id, ".approvals-pending");
    let decided = p.get("/api/v1/approvals?state=decided");
    assert_eq!(decided[0]["value"], json!(3), "{decided}");
    assert_eq!(decided[0]["by"], json!("web"), "{decided}");
}
