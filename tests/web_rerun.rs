//! The run page's "run again from this step" control in a real headless Chromium against
//! `treadle serve`: a finished run's step starts a new run in which that step and the
//! steps after it run even though cached, while the steps before it come from the cache.

use crate::served;

use serde_json::{Value, json};
use served::{Page, WAIT};

const CHAIN: &str = "jobs:\n  - name: main\n    plan:\n      - task: fetch\n        outputs: [src]\n        run: echo data > src/d.txt\n      - do:\n          - task: build\n            inputs: [src]\n            run: cat src/d.txt\n      - task: ship\n        run: echo shipped\n";

/// `(name, cached)` of the leaf steps of a run's tree, in plan order.
fn leaves(run: &Value) -> Vec<(String, bool)> {
    fn walk(nodes: &Value, out: &mut Vec<(String, bool)>) {
        for n in nodes.as_array().into_iter().flatten() {
            if n["children"].as_array().is_some_and(|c| !c.is_empty()) {
                walk(&n["children"], out);
            } else {
                let name = n["name"].as_str().unwrap_or_default().to_owned();
                out.push((name, n["cached"] == json!(true)));
            }
        }
    }
    let mut out = Vec::new();
    walk(&run["steps"], &mut out);
    out
}

#[test]
fn run_again_from_a_step_reruns_it_and_what_follows_from_the_run_page() {
    let Some(p) = Page::tasks(
        "run_again_from_a_step_reruns_it_and_what_follows_from_the_run_page",
        CHAIN,
    ) else {
        return;
    };
    let first = p.start_run();
    assert_eq!(p.wait_run(first)["status"], json!("succeeded"));
    // An ordinary second run replays everything: the control is what makes steps run.
    let second = p.start_run();
    let run = p.wait_run(second);
    assert!(leaves(&run).iter().all(|(_, cached)| *cached), "{run}");

    p.open(&format!("/runs/{second}"));
    p.b.wait_for(
        "the stream to end",
        "document.body.dataset.stream === 'ended'",
        WAIT,
    );
    let block = run["steps"][1]["seq"].as_u64().expect("block seq");
    let build = run["steps"][1]["children"][0]["seq"]
        .as_u64()
        .expect("build seq");
    let shown = |seq: u64| {
        p.b.eval(
            "const b = document.querySelector(`#step-${arguments[0]} > .row button.rerun`); return !!(b && b.offsetParent);",
            json!([seq]),
        )
    };
    p.b.wait_for(
        "the control on the finished run's steps",
        &format!("!!document.querySelector('#step-{build} > .row button.rerun')?.offsetParent"),
        WAIT,
    );
    assert_eq!(
        shown(block),
        json!(false),
        "a block has no control of its own"
    );
    p.b.click(&format!("#step-{build} > .row button.rerun"));
    let third = second + 1;
    p.b.wait_for(
        "the new run's page",
        &format!("location.pathname === '/runs/{third}' && document.body.dataset.ready === 'true'"),
        WAIT,
    );
    let run = p.wait_run(third);
    assert_eq!(run["status"], json!("succeeded"), "{run}");
    assert_eq!(run["trigger"], json!("web"), "{run}");
    assert_eq!(
        leaves(&run),
        [
            ("fetch".to_owned(), true),
            ("build".to_owned(), false),
            ("ship".to_owned(), false)
        ],
        "{run}"
    );
}
