//! A question (an `input:` step) answered from the page in a real headless Chromium against
//! `treadle serve`: the approvals page shows a form generated from the question's schema,
//! an answer that does not fit is refused with the server's reason and the question stays
//! open, and a valid one continues the run, which reads the answer.

use crate::served;

use serde_json::json;
use served::{Page, WAIT};

#[test]
fn a_question_is_answered_from_a_form_built_from_its_schema() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - input: replicas\n        question: How many replicas?\n        schema: { type: integer, minimum: 1, maximum: 9 }\n        outputs: [answer]\n      - task: scale\n        inputs: [answer]\n        run: echo \"scaling to $(cat answer/answer.json)\"\n";
    let Some(p) = Page::tasks(
        "a_question_is_answered_from_a_form_built_from_its_schema",
        yaml,
    ) else {
        return;
    };
    let id = p.start_run();
    p.open("/approvals");
    p.b.wait_for(
        "the question's form",
        "document.querySelector('.approvals-pending form.question-form input[type=number][max=\"9\"]')",
        WAIT,
    );
    let text = p.b.eval(
        "return document.querySelector('.question-form .q-text').textContent",
        json!([]),
    );
    assert_eq!(text, json!("How many replicas?"));

    // Out of the schema's range: refused, with the server's reason, and still open.
    p.b.type_into(".question-form input[type=number]", "12");
    p.b.click(".question-form button.answer");
    let refused = p.b.wait_for(
        "the refusal",
        "document.querySelector('.question-form .q-status')?.textContent || null",
        WAIT,
    );
    assert!(
        refused.as_str().unwrap_or_default().contains("maximum"),
        "{refused}"
    );
    let pending = p.get("/api/v1/approvals?state=pending");
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    assert_eq!(pending[0]["question"]["schema"]["maximum"], json!(9));

    p.b.eval(
        "document.querySelector('.question-form input[type=number]').value = ''",
        json!([]),
    );
    p.b.type_into(".question-form input[type=number]", "3");
    p.b.click(".question-form button.answer");
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("succeeded"), "{run}");
    assert!(
        run["steps"][1]["output_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("scaling to 3"),
        "{run}"
    );
    let decided = p.get("/api/v1/approvals?state=decided");
    assert_eq!(decided[0]["value"], json!(3), "{decided}");
    assert_eq!(decided[0]["by"], json!("web"), "{decided}");
}
