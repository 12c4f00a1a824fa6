//! `treadle watch` killed in the middle of an agent step goes on with that build when it
//! starts again, before it builds anything newer: the real binary, a real git repository,
//! the scripted model (the writer of `agent_resume`). After the restart the model is asked
//! the request that was in flight and the last one for the first build (no committed step
//! again), and only then the four requests of the next version's build.

use crate::agent_resume::{results, writer};
use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::watch::{Watcher, commit, init_repo};
use treadle_scripted::ScriptedServer;

const PIPELINE: &str = r#"
resources:
  - name: repo
    type: git
    source: { uri: ./repo, branch: main }
agents:
  - name: writer
    tools: [write_file]
jobs:
  - name: build
    plan:
      - get: repo
        trigger: true
      - agent: writer
        name: write
        outputs: [out]
        prompt: Write out/a, out/b and out/c, then say done.
      - task: show
        inputs: [out]
        run: echo "files:$(cat out/a out/b out/c)"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_killed_mid_agent_step_goes_on_with_that_build_first() {
    let model = ScriptedServer::start(writer()).await.expect("model");
    let f = Fixture::new(PIPELINE);
    init_repo(&f.path().join("repo"), "v1");
    let env = [("TREADLE_LOCAL_URL", model.base_url())];
    let args = ["treadle.yml", "--interval", "200ms"];
    let mut first = Watcher::start(&f, &args, &env, "watch1.log");
    assert!(
        model.wait_requests(3, Duration::from_secs(90)).await,
        "the first build never asked for out/c:\n{}",
        first.said()
    );
    first.signal("-KILL");
    first.wait(Duration::from_secs(10));
    commit(&f.path().join("repo"), "v2");
    let second = Watcher::start(&f, &args, &env, "watch2.log");
    let started = Instant::now();
    // The first build's two, then the second build's four.
    while model.request_count() < 3 + 6 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{} requests; the watcher said:\n{}",
            model.request_count(),
            second.said()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after: Vec<usize> = model.requests()[3..]
        .iter()
        .map(|r| results(&r.body))
        .collect();
    assert_eq!(
        after,
        vec![2, 3, 0, 1, 2, 3],
        "the interrupted build went on first, asking nothing committed again"
    );
    assert!(second.said().contains("resuming run"), "{}", second.said());
    // The resumed build succeeded: its task read every file, those the committed calls
    // wrote before the kill among them (`cat out/a out/b out/c`).
    assert!(
        second.said().contains("`build` run 2 succeeded"),
        "{}",
        second.said()
    );
}
