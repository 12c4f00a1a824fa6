//! A step's lease (`src/dist/lease.rs`) against a real `nats-server -js` on loopback:
//!
//! * `a_step_handed_again_to_the_worker_running_it_is_busy_not_taken`: a worker that runs a
//!   step and is handed the step's message again (redelivered to it, after an outage that
//!   outlasted the ack wait) must find the lease held and renewed, not take it as its own
//!   lost write: the lease named only the worker, so the second copy started the task again
//!   while the first still ran it (the cluster test's "a task started twice"). The first
//!   take still commits its result, which a later copy then finds.

use crate::common;

use common::nats::Nats;
use treadle::dist::bus::Bus;
use treadle::dist::connect::{NatsConfig, parse_urls};
use treadle::dist::lease::{self, Acquired};
use treadle::dist::wire::StepResult;

#[tokio::test(flavor = "multi_thread")]
async fn a_step_handed_again_to_the_worker_running_it_is_busy_not_taken() {
    let test = "a_step_handed_again_to_the_worker_running_it_is_busy_not_taken";
    let Some(nats) = Nats::start(test) else {
        return;
    };
    let (servers, credentials) = parse_urls(&nats.url).expect("url");
    let config = NatsConfig {
        servers,
        credentials,
        ..NatsConfig::default()
    };
    let bus = Bus::connect(&config, "lease-test").await.expect("connect");
    let (key, worker) = ("1.1.1", "worker-1");

    let Acquired::Held(first) = lease::acquire(&bus, key, worker).await else {
        panic!("the first take holds the lease");
    };
    // The same worker, handed the step again while its first take runs it.
    match lease::acquire(&bus, key, worker).await {
        Acquired::Busy => {}
        Acquired::Held(_) => panic!("a second take of the running step holds its lease too"),
        Acquired::Finished(_) => panic!("no result was committed"),
    }
    let result = StepResult {
        status: "succeeded".to_owned(),
        ..StepResult::cancelled()
    };
    first.commit(&result).await.expect("the first take commits");
    match lease::acquire(&bus, key, worker).await {
        Acquired::Finished(r) => assert_eq!(r.status, "succeeded"),
        _ => panic!("a copy after the commit finds the result"),
    }
}
