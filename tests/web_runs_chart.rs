//! The runs list in a real headless Chromium (issue 30, item 5): runs started from the
//! "Start run" form with the pipeline's vars and a job chosen, and the job's chart over them
//! with axes, units and a legend, the failed run marked, and a click on a bar opening it;
//! priced runs' cost drawn as a line against a dollar axis.

use crate::served;

use std::time::Duration;

use serde_json::json;
use served::{Page, WAIT};
use treadle_scripted::Reply;

const TWO_JOBS: &str = "jobs:\n  - name: check\n    plan:\n      - task: compare\n        run: echo \"got ((outcome))\" && test \"((outcome))\" = ok\n  - name: other\n    plan:\n      - task: hello\n        run: echo hello\n";

#[test]
fn runs_started_from_the_form_are_charted_with_axes_and_failures_marked() {
    let Some(p) = Page::tasks(
        "runs_started_from_the_form_are_charted_with_axes_and_failures_marked",
        TWO_JOBS,
    ) else {
        return;
    };
    // The form asks for the var the file uses, and the job.
    p.open("/");
    let form = p.b.wait_for(
        "the start form",
        "(() => { const f = document.querySelector('form.start-form'); return f ? [[...f.querySelectorAll('input.var')].map((i) => i.name), [...f.querySelectorAll('select.job option')].map((o) => o.value)] : null; })()",
        WAIT,
    );
    assert_eq!(form, json!([["var-outcome"], ["check", "other"]]));
    let mut ids = Vec::new();
    for value in ["ok", "bad", "ok"] {
        p.open("/");
        p.b.wait_for(
            "the form",
            "document.querySelector('form.start-form input.var')",
            WAIT,
        );
        p.b.eval(
            "const s = document.querySelector('form.start-form select.job'); s.value = 'check'; s.dispatchEvent(new Event('change'));",
            json!([]),
        );
        p.b.type_into("form.start-form input[name=var-outcome]", value);
        p.b.click("form.start-form button.start");
        let path = p.b.wait_for(
            "the new run's page",
            "/^\\/runs\\/\\d+$/.test(location.pathname) && location.pathname",
            WAIT,
        );
        let id: u64 = path
            .as_str()
            .and_then(|s| s.rsplit('/').next())
            .and_then(|s| s.parse().ok())
            .expect("run id");
        let run = p.wait_run(id);
        assert_eq!(run["job"], json!("check"), "{run}");
        assert_eq!(run["trigger"], json!("web"), "{run}");
        let want = if value == "ok" { "succeeded" } else { "failed" };
        assert_eq!(run["status"], json!(want), "{run}");
        assert!(
            run["steps"][0]["output_tail"]
                .as_str()
                .is_some_and(|t| t.contains(&format!("got {value}"))),
            "the var reached the command as data: {run}"
        );
        ids.push(id);
    }
    p.open("/");
    let chart = p.b.wait_for(
        "the chart of job check",
        r#"(() => {
        const f = document.querySelector('figure.chart[data-job="check"]');
        if (!f || f.querySelectorAll('g.bar-run').length < 3) return null;
        return {
            bars: [...f.querySelectorAll('g.bar-run')].map((g) => [Number(g.dataset.run), g.classList.contains('failed'), !!g.querySelector('.fail-mark')]),
            ticks: [...f.querySelectorAll('.axis-left text')].map((t) => t.textContent),
            titles: [...f.querySelectorAll('.axis-title')].map((t) => t.textContent),
            runs: [...f.querySelectorAll('.run-label')].map((t) => t.textContent),
            legend: [...f.querySelectorAll('.legend > span')].map((s) => s.textContent),
        };
        })()"#,
        WAIT,
    );
    // Oldest on the left; the failed run, and only it, marked.
    assert_eq!(
        chart["bars"],
        json!([
            [ids[0], false, false],
            [ids[1], true, true],
            [ids[2], false, false]
        ]),
        "{chart}"
    );
    assert_eq!(chart["ticks"].as_array().map(Vec::len), Some(3), "{chart}");
    assert_eq!(chart["ticks"][0], json!("0"), "{chart}");
    let titles = chart["titles"].to_string();
    assert!(
        titles.contains("duration (ms)") || titles.contains("duration (s)"),
        "{chart}"
    );
    assert!(titles.contains("\"run\""), "{chart}");
    assert_eq!(
        chart["runs"],
        json!(ids.iter().map(|i| format!("#{i}")).collect::<Vec<_>>()),
        "{chart}"
    );
    let legend = chart["legend"].to_string();
    for part in ["duration (", "failed run", "cost"] {
        assert!(
            legend.contains(part),
            "{part} missing from the legend: {chart}"
        );
    }
    // A click on the failed run's bar opens it.
    p.b.eval(
        "document.querySelector(`figure.chart[data-job=\"check\"] g.bar-run[data-run=\"${arguments[0]}\"]`).dispatchEvent(new MouseEvent('click', {bubbles: true}))",
        json!([ids[1]]),
    );
    p.b.wait_for(
        "the failed run's page",
        &format!(
            "location.pathname === '/runs/{}' && document.body.dataset.ready === 'true'",
            ids[1]
        ),
        WAIT,
    );
    p.b.wait_for(
        "its failure",
        "document.querySelector('.run-head .badge')?.textContent === 'failed'",
        WAIT,
    );
}

#[test]
fn priced_runs_draw_their_cost_against_a_dollar_axis() {
    let yaml = "prices:\n  local/qwen2.5-coder-0.5b: { prompt: 1000, completion: 1000 }\nagents:\n  - name: talker\n    system: You talk.\njobs:\n  - name: talk\n    plan:\n      - agent: talker\n        prompt: Say something.\n";
    let Some(p) = Page::start(
        "priced_runs_draw_their_cost_against_a_dollar_axis",
        yaml,
        vec![
            Reply::text("One.").usage(100, 10),
            Reply::text("Two.").usage(300, 30),
        ],
        Duration::ZERO,
    ) else {
        return;
    };
    let mut costs = Vec::new();
    for _ in 0..2 {
        // `rerun`: the second run's agent step is not taken from the first one's cache.
        let id = p.post(
            "/api/v1/runs",
            json!({"pipeline": "treadle", "rerun": "talker"}),
        )["id"]
            .as_u64()
            .expect("run id");
        let run = p.wait_run(id);
        assert_eq!(run["status"], json!("succeeded"), "{run}");
        costs.push(run["cost_usd"].as_f64().expect("a priced run"));
    }
    assert!(costs[1] > costs[0], "{costs:?}");
    p.open("/");
    let chart = p.b.wait_for(
        "the cost line",
        r#"(() => {
        const f = document.querySelector('figure.chart[data-job="talk"]');
        const dots = [...(f?.querySelectorAll('circle.cost-dot') ?? [])];
        if (dots.length < 2) return null;
        return {
            ticks: [...f.querySelectorAll('.axis-right text')].map((t) => t.textContent),
            dots: dots.map((d) => Number(d.getAttribute('cy'))),
            line: f.querySelector('polyline.cost-line')?.getAttribute('points').split(' ').length,
            titles: [...f.querySelectorAll('.axis-title')].map((t) => t.textContent),
            legend: f.querySelector('.legend').textContent,
        };
        })()"#,
        WAIT,
    );
    let ticks: Vec<f64> = chart["ticks"]
        .as_array()
        .expect("ticks")
        .iter()
        .map(|t| {
            t.as_str()
                .and_then(|t| t.strip_prefix('$'))
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("a dollar tick: {chart}"))
        })
        .collect();
    assert_eq!(ticks.len(), 3, "{chart}");
    assert_eq!(ticks[0], 0.0, "{chart}");
    assert!(
        ticks[2] >= costs[1],
        "the axis holds the dearest run: {chart}"
    );
    assert_eq!(chart["line"], json!(2), "{chart}");
    // The dearer run's point stands higher (a smaller y).
    assert!(
        chart["dots"][1].as_f64() < chart["dots"][0].as_f64(),
        "{chart}"
    );
    assert!(chart["titles"].to_string().contains("cost ($)"), "{chart}");
    assert!(
        chart["legend"]
            .as_str()
            .is_some_and(|l| l.contains("cost ($)")),
        "{chart}"
    );
}
