//! The run page of `treadle serve` in a real headless Chromium: a real run of a pipeline
//! whose agent delegates to a sub-agent (both scripted) shows the sub-agent's conversation
//! nested under the parent step (issue 11), and a question waiting in a run is answered
//! from a form on the run page itself, generated from its schema (issue 13).

use crate::served;

use std::time::Duration;

use serde_json::json;
use served::{Page, WAIT};
use treadle_scripted::Reply;

const DIGEST: &str = r#"
agents:
  - name: summarizer
    system: You summarize files.
    tools: [read_file]
  - name: lead
    system: You lead.
    tools:
      - read_file
      - agent: summarizer
        description: Summarize a file; pass the path in `request`.
jobs:
  - name: digest
    plan:
      - task: fetch
        outputs: [notes]
        run: echo 'a very long account of the outage' > notes/log.txt
      - agent: lead
        inputs: [notes]
        prompt: Have your summarizer condense notes/log.txt, then report.
"#;

#[test]
fn a_sub_agent_is_shown_nested_under_its_parent_step() {
    let Some(p) = Page::start(
        "a_sub_agent_is_shown_nested_under_its_parent_step",
        DIGEST,
        vec![
            Reply::tool_call("summarizer", json!({"request": "Condense notes/log.txt."})),
            Reply::tool_call("read_file", json!({"path": "notes/log.txt"})),
            Reply::text("The log says there was an outage."),
            Reply::text("Report: **there was an outage**."),
        ],
        Duration::from_millis(5),
    ) else {
        return;
    };
    let id = p.start_run();
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("succeeded"), "{run}");
    p.open(&format!("/runs/{id}"));
    let lead = run["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "lead")
        .map(|s| s["seq"].clone())
        .expect("the lead step");
    // An agent step starts unfolded: its conversation is on the page.
    let view = p.b.wait_for(
        "the nested sub-agent",
        r#"(() => {
        const step = document.querySelector(`#step-${arguments[0]}`);
        if (!step) return null;
        const sub = step.querySelector('.convo .sub-agent');
        if (!sub) return null;
        const parentCall = [...step.querySelectorAll('.convo > .call')]
            .find((c) => c.querySelector('.tool')?.textContent === 'summarizer');
        return {
            name: sub.querySelector('.sub-name')?.textContent,
            tools: [...sub.querySelectorAll('.call .tool')].map((t) => t.textContent),
            text: sub.querySelector('.turn-text')?.textContent,
            result: parentCall?.querySelector('.result')?.textContent ?? null,
            answer: [...step.querySelectorAll('.convo > .turn-text')].map((t) => t.innerHTML).join(' '),
            inside: sub.closest(`#step-${arguments[0]}`) !== null,
        };
        })()"#
        .replace("arguments[0]", &lead.to_string())
        .as_str(),
        WAIT,
    );
    assert_eq!(view["name"], json!("sub-agent summarizer"), "{view}");
    assert_eq!(view["tools"], json!(["read_file"]), "{view}");
    assert_eq!(view["inside"], json!(true), "{view}");
    assert!(
        view["text"]
            .as_str()
            .is_some_and(|t| t.contains("there was an outage")),
        "{view}"
    );
    // The delegation itself is a call of the parent, with the sub-agent's answer as result.
    assert!(
        view["result"]
            .as_str()
            .is_some_and(|t| t.contains("The log says there was an outage.")),
        "{view}"
    );
    assert!(
        view["answer"]
            .as_str()
            .is_some_and(|t| t.contains("<strong>there was an outage</strong>")),
        "{view}"
    );
}

#[test]
fn a_question_in_a_run_is_answered_from_the_run_page() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - input: replicas\n        question: How many replicas?\n        schema: { type: integer, minimum: 1, maximum: 9 }\n        outputs: [answer]\n      - task: scale\n        inputs: [answer]\n        run: echo \"scaling to $(cat answer/answer.json)\"\n";
    let Some(p) = Page::start(
        "a_question_in_a_run_is_answered_from_the_run_page",
        yaml,
        vec![],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "the question's form in the run's approval box",
        "document.querySelector('#tree .approval form.question-form input[type=number][max=\"9\"]')",
        WAIT,
    );
    let text = p.b.eval(
        "return document.querySelector('#tree .question-form .q-text').textContent",
        json!([]),
    );
    assert_eq!(text, json!("How many replicas?"));

    // Out of range: the server's refusal is shown and the question stays open.
    p.b.type_into("#tree .question-form input[type=number]", "12");
    p.b.click("#tree .question-form button.answer");
    let refused = p.b.wait_for(
        "the refusal",
        "document.querySelector('#tree .question-form .q-status')?.textContent || null",
        WAIT,
    );
    assert!(
        refused.as_str().unwrap_or_default().contains("maximum"),
        "{refused}"
    );
    let pending = p.get("/api/v1/approvals?state=pending");
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");

    p.b.eval(
        "document.querySelector('#tree .question-form input[type=number]').value = ''",
        json!([]),
    );
    p.b.type_into("#tree .question-form input[type=number]", "3");
    p.b.click("#tree .question-form button.answer");
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("succeeded"), "{run}");
    // The answer reached the next step, and the page shows the question answered.
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
    p.b.wait_for(
        "the approval box to say answered",
        "document.querySelector('#tree .approval:not(.ap-pending)') !== null || null",
        WAIT,
    );
    let shown = p.b.eval(
        "return document.querySelector('#tree .approval')?.textContent ?? null",
        json!([]),
    );
    assert!(
        shown.as_str().is_some_and(|t| !t.contains("Answer")),
        "the form is still there: {shown}"
    );
}
