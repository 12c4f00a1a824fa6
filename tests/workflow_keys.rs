//! One executor, two front ends: the review workflow of examples/review_workflow.rs and
//! the equivalent YAML pipeline, run against the same scripted model (one server, so the
//! agents' endpoints are the same), each in a state file of its own, record the same
//! steps with the same keys.

use std::path::Path;

use serde_json::{Value, json};
use treadle::cache::records::Records;
use treadle::run::Store;
use treadle::workflow::{self, Agents, Options};
use treadle_scripted::{Reply, Script, ScriptedServer};

use crate::common::Fixture;
use crate::workflow_examples::review_workflow::{DRAFT, PROMPT, Review};

/// The model's side of one approving review.
fn approving() -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Fine notes."}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "clear"})),
        Reply::text("Approved."),
    ]
}

/// The reviewer of review.yml, on the scripted server at `url`.
pub fn reviewer(url: &str) -> Value {
    json!({
        "name": "reviewer",
        "source": { "model": "scripted", "endpoint": url },
        "system": "You review short texts. Be terse.",
        "tools": ["read_file", "list_dir", "write_file"],
        "temperature": 0,
    })
}

/// The workflow's steps written as YAML (JSON is YAML): what `Review` calls on approval.
fn equivalent_pipeline(url: &str) -> String {
    json!({
        "agents": [reviewer(url)],
        "jobs": [{ "name": "review", "plan": [
            { "task": "draft", "outputs": ["draft"], "run": DRAFT },
            { "agent": "reviewer", "name": "reviewer", "inputs": ["draft"],
              "outputs": ["report"], "prompt": PROMPT, "verdicts": ["approve", "reject"],
              "timeout": "5m" },
            { "task": "publish", "inputs": ["draft", "report"],
              "run": "cat report/summary.md draft/notes.md" },
        ]}],
    })
    .to_string()
}

/// Each step's record of run `run` without its clock readings, and its key.
pub(crate) fn records_and_keys(state: &Path, run: u64) -> Vec<(Value, String)> {
    let store = Store::open(state).expect("state file");
    let results = Records::open(store.database()).expect("cache tables");
    store
        .steps(run)
        .expect("steps")
        .into_iter()
        .map(|r| {
            let key = results
                .result(run, r.seq)
                .expect("read")
                .map(|o| o.key.hex())
                .unwrap_or_default();
            let mut v = serde_json::to_value(&r).expect("record");
            if let Value::Object(m) = &mut v {
                m.remove("started_ms");
                m.remove("duration_ms");
            }
            (v, key)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_and_its_yaml_record_the_same_steps_under_the_same_keys() {
    let script: Vec<Reply> = approving().into_iter().chain(approving()).collect();
    let server = ScriptedServer::start(Script::new(script))
        .await
        .expect("server");
    let url = server.base_url().to_owned();
    let yaml = Fixture::new(&equivalent_pipeline(&url));
    let (yaml, run) = yaml.run_at(&url).await;
    run.expect_code(0);

    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let agents_yaml = json!({ "agents": [reviewer(&url)] }).to_string();
    let agents = Agents::from_yaml(&agents_yaml).expect("agents");
    let options = Options::new(&state).agents(agents);
    let report = workflow::run(&Review, (), options).await.expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output);
    assert!(
        report
            .output
            .as_deref()
            .is_ok_and(|o| o.contains("Fine notes.")),
        "{:?}",
        report.output
    );

    let from_yaml = records_and_keys(&yaml.path().join(".treadle/state.redb"), 1);
    let from_rust = records_and_keys(&state, report.run);
    assert_eq!(from_yaml.len(), 3, "{from_yaml:#?}");
    for ((y, ykey), (r, rkey)) in from_yaml.iter().zip(&from_rust) {
        assert!(!ykey.is_empty(), "a succeeded step has a key: {y}");
        assert_eq!(ykey, rkey, "keys differ:\nyaml {y}\nrust {r}");
        assert_eq!(y, r, "records differ");
    }
    assert_eq!(from_yaml.len(), from_rust.len(), "{from_rust:#?}");
    assert_eq!(
        server.request_count(),
        8,
        "each run asked the model 4 times"
    );
}
