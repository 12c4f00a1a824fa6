//! A run parked on a person reads as such: "waiting for approval" with its deadline and
//! what the deadline decides, on the runs list and the run page (Chromium against
//! `treadle serve`), in the API's run (`waiting`) and in `treadle runs` through the server.

use crate::served;

use serde_json::json;
use served::{Page, WAIT};

const GATED: &str = "jobs:\n  - name: main\n    plan:\n      - task: build\n        run: echo built\n      - approval: ship it\n        message: Ship the build?\n        timeout: 15m\n        on_timeout: reject\n      - task: ship\n        run: echo shipped\n";

#[test]
fn a_run_waiting_for_approval_says_so_with_its_deadline_on_the_list_and_its_page() {
    let test = "a_run_waiting_for_approval_says_so_with_its_deadline_on_the_list_and_its_page";
    let Some(p) = Page::tasks(test, GATED) else {
        return;
    };
    let id = p.start_run();
    let started = std::time::Instant::now();
    let run = loop {
        let run = p.get(&format!("/api/v1/runs/{id}"));
        if run["waiting"].is_object() {
            break run;
        }
        assert!(started.elapsed() < WAIT, "never waiting: {run}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(run["waiting"]["kind"], "approval", "{run}");
    assert_eq!(run["waiting"]["step"], "ship it", "{run}");
    assert_eq!(run["waiting"]["on_timeout"], "reject", "{run}");
    assert!(run["waiting"]["deadline_ms"].as_u64().is_some(), "{run}");
    // The runs list.
    p.open("/");
    let row = p.b.wait_for(
        "the run's row to say it waits",
        &format!(
            "(() => {{ const r = document.querySelector('tr[data-run=\"{id}\"] td.status'); return r && r.textContent.includes('waiting for approval') ? r.textContent : null; }})()"
        ),
        WAIT,
    );
    let row = row.as_str().unwrap_or_default().to_owned();
    // The page counts down from the 15 minutes, and may paint within the first second.
    assert!(
        (row.contains("ship it: 14 m") || row.contains("ship it: 15 m 0 s"))
            && row.contains("left, then reject"),
        "{row}"
    );
    // The run page's header.
    p.open(&format!("/runs/{id}"));
    let header = p.b.wait_for(
        "the header to say it waits",
        "(() => { const t = document.body.textContent; return t.includes('waiting for approval') ? (document.querySelector('.run-wait')?.textContent ?? null) : null; })()",
        WAIT,
    );
    assert!(
        header
            .as_str()
            .unwrap_or_default()
            .contains("left, then reject"),
        "{header}"
    );
    // `treadle runs` through the server.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("runs")
        .current_dir(&p.server.dir)
        .output()
        .expect("treadle runs");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_default();
    assert!(
        line.contains("waiting for approval") && line.contains("left, then reject"),
        "{out}"
    );
    // Answered, it no longer waits.
    let seq = run["waiting"]["seq"].as_u64().expect("seq");
    p.post(
        &format!("/api/v1/runs/{id}/approvals/{seq}"),
        json!({"decision": "approve", "by": "test"}),
    );
    let ended = p.wait_run(id);
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert!(ended.get("waiting").is_none(), "{ended}");
}
