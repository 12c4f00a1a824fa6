//! The run page of issue 40 (item "reading runs"), in a real headless Chromium against
//! `treadle serve` and the scripted model server: a `fix:` note sits under the task it
//! repairs (not among the run's notes at the top), the fixer's conversation is headed with
//! its agent, and a step's model calls are numbered on through a verdict reminder (1, 2, 3,
//! 4, not 1, 2, 1, 2: the session counts each turn from one).

use crate::served;

use std::time::Duration;

use serde_json::json;
use served::{Page, WAIT};
use treadle_scripted::Reply;

#[test]
fn the_fix_note_heads_its_step_under_the_fixers_name_and_calls_are_numbered_through() {
    let yaml = "agents:\n  - name: fixer\n    tools: [write_file]\n  - name: judge\n    tools: [read_file]\njobs:\n  - name: main\n    plan:\n      - task: check\n        run: test -f config.json\n        fix: fixer\n      - agent: judge\n        prompt: Read notes.txt, then say pass or fail.\n        verdicts:\n          - pass: ok\n          - fail: ok\n      - task: ok\n        run: echo done\n";
    let Some(p) = Page::start(
        "the_fix_note_heads_its_step_under_the_fixers_name_and_calls_are_numbered_through",
        yaml,
        vec![
            // The fixer: one call, then its answer.
            Reply::tool_call(
                "write_file",
                json!({"path": "config.json", "content": "{}"}),
            ),
            Reply::text("Wrote config.json."),
            // The judge: two calls in its first turn, no verdict; two more in the
            // reminder's turn, which gives it.
            Reply::tool_call("read_file", json!({"path": "notes.txt"})),
            Reply::text("It looks fine."),
            Reply::tool_call("verdict", json!({"verdict": "pass", "reason": "fine"})),
            Reply::text("Done."),
        ],
        Duration::ZERO,
    ) else {
        return;
    };
    let id = p.start_run();
    let run = p.wait_run(id);
    assert_eq!(run["status"], json!("succeeded"), "{run}");
    p.open(&format!("/runs/{id}"));
    let seen = p.b.wait_for(
        "the fixer's heading and the judge's numbered calls",
        r#"(() => {
        const named = (n) => [...document.querySelectorAll('li.step')]
            .find((s) => s.querySelector(':scope > .row .name')?.textContent === n);
        const check = named('check');
        const judge = named('judge');
        // A task that succeeded is folded: open it once.
        if (check && !window.__opened) {
            window.__opened = true;
            if (!check.querySelector('.convo')) check.querySelector(':scope > .row').click();
        }
        const fixer = check?.querySelector('.convo .fixer');
        const calls = [...(judge?.querySelectorAll('.model-call') ?? [])];
        if (!fixer || calls.length < 4) return null;
        return {
            fixer: fixer.textContent,
            agent: fixer.dataset.agent,
            first: check.querySelector('.convo > *').className,
            top: [...document.querySelectorAll('.notices li')].map((l) => l.textContent),
            numbers: calls.map((c) => c.dataset.number),
            labels: calls.map((c) => c.querySelector('.t-label').textContent),
        };
        })()"#,
        WAIT,
    );
    let fixer = seen["fixer"].as_str().unwrap_or_default();
    assert!(fixer.contains("fixer agent fixer"), "{seen}");
    assert!(fixer.contains("fix: `check` failed"), "{seen}");
    assert_eq!(seen["agent"], json!("fixer"), "{seen}");
    // The heading comes before the fixer's conversation.
    assert_eq!(seen["first"], json!("fixer"), "{seen}");
    assert!(
        !seen["top"].as_array().is_some_and(|t| t
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("fix:")))),
        "the fix note is among the run's notes at the top: {seen}"
    );
    assert_eq!(seen["numbers"], json!(["1", "2", "3", "4"]), "{seen}");
    assert_eq!(
        seen["labels"],
        json!([
            "model call 1",
            "model call 2",
            "model call 3",
            "model call 4"
        ]),
        "{seen}"
    );
}
