//! The run page of `treadle serve` in a real headless Chromium: a real run of a pipeline
//! whose agent delegates to a sub-agent (both scripted) shows the sub-agent's conversation
//! nested under the parent step (issue 11), and a question waiting in a run is answered
//! from a form on the run page itself, generated from its schema (issue 13).

use crate::served;

use std::time::Duration;

use serde_json::json;
use served::{Page, WAIT};
use treadle_scripted::Reply;

use crate::agent_delegation::DIGEST;

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
    let Some(p) = Page::start(
        "a_question_in_a_run_is_answered_from_the_run_page",
        served::REPLICAS,
        vec![],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    p.open(&format!("/runs/{id}"));
    p.answer_replicas(id, "#tree .approval");
    // The page shows the question answered.
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
