//! `across:` over agent cells against the scripted server: a `budget:` on the block stops
//! admitting cells once spent, and the plan carries on.

use crate::common;

use common::Fixture;
use treadle_scripted::{Reply, Script, ScriptedServer};

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_across_budget_admits_no_more_cells_and_the_plan_goes_on() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("api looks fine").usage(900, 300),
        Reply::text("must never be asked for").usage(1, 1),
    ]))
    .await
    .expect("server");
    let yaml = r#"
agents:
- name: reviewer
jobs:
- name: bounded
  plan:
  - across:
    - var: dim
      values: [api, errors, concurrency]
    budget: { tokens: 1000 }
    agent: reviewer
    prompt: "Review the {{ .vars.dim }} dimension."
  - task: publish
    run: echo publishing what we got
  assert:
    execution: ["reviewer [dim=api]", publish]
    outcome: success
"#;
    let f = Fixture::new(yaml);
    let url = server.base_url().to_string();
    let run = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("join")
    .1;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("budget: across stopped before cell 2 of 3 (spent 1200 of 1000 tokens)"),
        "{out}"
    );
    assert_eq!(server.requests().len(), 1, "a second cell called the model");
}
