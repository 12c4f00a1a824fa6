//! A step waiting on the NATS queue reads as such on the run page (Chromium against
//! `treadle serve --nats` with no worker): its badge says `queued`; once a `treadle worker`
//! takes it, `running` with the worker's name beside it, then `succeeded`.

use crate::common;
use crate::served;

use std::time::Duration;

use common::nats::{Nats, Worker};
use served::{Page, WAIT};

#[test]
fn a_queued_step_reads_queued_then_running_on_its_worker() {
    let test = "a_queued_step_reads_queued_then_running_on_its_worker";
    let Some(nats) = Nats::start(test) else {
        return;
    };
    let yaml =
        "jobs:\n  - name: main\n    plan:\n      - task: build\n        run: sleep 2; echo built\n";
    let args = ["--nats", nats.url.as_str()];
    let Some(p) = Page::start_with(test, yaml, Vec::new(), Duration::ZERO, &args, &[]) else {
        return;
    };
    let id = p.start_run();
    p.open(&format!("/runs/{id}"));
    let seq = p.get(&format!("/api/v1/runs/{id}"))["steps"][0]["seq"]
        .as_u64()
        .expect("seq");
    let badge = format!("document.querySelector('#step-{seq} > .row .badge')?.textContent");
    p.b.wait_for(
        "the step's badge to say queued",
        &format!("{badge} === 'queued'"),
        WAIT,
    );
    let worker = Worker::start(&nats.url, 1, &p.server.dir.join("w"), &[]);
    let name = format!("worker-{}-", worker.pid());
    let row = p.b.wait_for(
        "the step to run on the worker",
        &format!(
            "{badge} === 'running' && document.querySelector('#step-{seq} > .row .meta').textContent.includes('on {name}') && document.querySelector('#step-{seq} > .row').textContent"
        ),
        WAIT,
    );
    assert!(!row.to_string().contains("queued"), "{row}");
    p.b.wait_for(
        "the step to succeed",
        &format!("{badge} === 'succeeded'"),
        WAIT,
    );
    let ended = p.wait_run(id);
    assert_eq!(ended["status"], "succeeded", "{ended}\n{}", worker.log());
}
